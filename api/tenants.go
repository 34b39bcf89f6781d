package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Tenants over the API: GET /v1/tenants, GET|PATCH /v1/tenants/{t} and
// GET /v1/admission answer from a TenantService (the admission state of
// package admission, where a policy is published); a caller's tenant
// (boundTenant) limits what it may read, and only an unbound caller may
// change a tenant's settings.

// ErrTenantNotFound is a TenantService's answer for a tenant it does not
// know.
var ErrTenantNotFound = errors.New("tenant not found")

// TenantService is what the tenant routes read and write. Each method
// that lists is told the caller's bound tenant ("" for an unbound
// caller), and must name no other tenant to a bound one.
type TenantService interface {
	// Tenants is the body of GET /v1/tenants: every tenant known, or
	// only the bound one.
	Tenants(ctx context.Context, bound string) (any, error)
	// Tenant is the body of GET /v1/tenants/{t}; ErrTenantNotFound for a
	// tenant it does not know, unless own (the caller is bound to it: a
	// bound caller's tenant exists, runs or not).
	Tenant(ctx context.Context, tenant string, own bool) (any, error)
	// SetTenant applies PATCH /v1/tenants/{t}'s body (the fields of
	// `spool tenant set`) and answers the tenant as Tenant does.
	SetTenant(ctx context.Context, tenant string, body json.RawMessage) (any, error)
	// Admission is the body of GET /v1/admission: the published policy's
	// digest and version.
	Admission(ctx context.Context, bound string) (any, error)
}

// runTenants is the TenantService of a server without admission state:
// what the registry knows of tenants (their runs), and the published
// policy's digest read from Redis.
type runTenants struct{ o *orchestrator.Orchestrator }

func (t runTenants) Tenants(ctx context.Context, bound string) (any, error) {
	names := []string{bound}
	if bound == "" {
		var err error
		if names, err = t.o.KnownTenants(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]spooltype.TenantRuns, 0, len(names))
	for _, n := range names {
		runs, err := t.o.TenantRuns(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, spooltype.TenantRuns{Tenant: n, Runs: runs})
	}
	return out, nil
}

func (t runTenants) Tenant(ctx context.Context, tenant string, own bool) (any, error) {
	runs, err := t.o.TenantRuns(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if runs == 0 && tenant != thread.DefaultTenant && !own {
		return nil, ErrTenantNotFound
	}
	return spooltype.TenantRuns{Tenant: tenant, Runs: runs}, nil
}

func (t runTenants) SetTenant(context.Context, string, json.RawMessage) (any, error) {
	return nil, &Problem{Type: "about:blank", Title: http.StatusText(http.StatusNotImplemented), Status: http.StatusNotImplemented,
		Code: "not_implemented", Detail: "tenant settings live in the admission policy: this server has none (spool admission apply)"}
}

func (t runTenants) Admission(ctx context.Context, _ string) (any, error) {
	raw, err := t.o.PublishedPolicy(ctx)
	if errors.Is(err, redis.Nil) || raw == nil {
		return spooltype.AdmissionState{}, nil
	}
	if err != nil {
		return nil, err
	}
	var p struct {
		Version int64           `json:"version"`
		Digest  string          `json:"digest"`
		Policy  json.RawMessage `json:"policy"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	on := len(p.Policy) > 0 && string(p.Policy) != "null"
	return spooltype.AdmissionState{On: on, Digest: p.Digest, Version: p.Version}, nil
}

// tenantNotFound is the answer for a tenant the caller may not see or
// that does not exist: the same for both.
func tenantNotFound(name string) *Problem {
	return problem(http.StatusNotFound, thread.CodeTenantNotFound, "tenant %q not found", name)
}

// tenantForbidden is a bound caller's answer for what only an unbound
// one may do.
func tenantForbidden(format string, args ...any) *Problem {
	return problem(http.StatusForbidden, thread.CodeTenantForbidden, format, args...)
}

// visible reports whether the caller may see rec: an unbound caller sees
// every run, a bound one its tenant's.
func visible(r *http.Request, rec *spooltype.Record) bool {
	b := boundTenant(r)
	return b == "" || rec.TenantOrDefault() == b
}

// listTenant is the tenant a list is limited to: the ?tenant= parameter
// (a bound caller's own tenant without one), checked; nil and a problem
// written when the parameter is bad or names a tenant the caller may not
// see or that does not exist.
func (s *server) listTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	return s.filterTenant(w, r, r.URL.Query().Get("tenant"))
}

// filterTenant is listTenant of a tenant named elsewhere (a body's).
func (s *server) filterTenant(w http.ResponseWriter, r *http.Request, q string) (string, bool) {
	q = strings.TrimSpace(q)
	bound := boundTenant(r)
	switch {
	case q == "":
		return bound, true
	case thread.CheckTenant(q) != nil:
		s.fail(w, r, "", thread.CheckTenant(q))
		return "", false
	case bound != "" && q != bound:
		writeProblem(w, r, tenantNotFound(q))
		return "", false
	case bound == "":
		if _, err := s.cfg.Tenants.Tenant(r.Context(), q, false); err != nil {
			s.tenantFail(w, r, q, err)
			return "", false
		}
	}
	return q, true
}

// tenantFail answers a TenantService's error about tenant name.
func (s *server) tenantFail(w http.ResponseWriter, r *http.Request, name string, err error) {
	if errors.Is(err, ErrTenantNotFound) || errors.Is(err, &thread.AdmissionError{Code: thread.CodeTenantNotFound}) {
		writeProblem(w, r, tenantNotFound(name))
		return
	}
	s.fail(w, r, "", err)
}

// tenantPrefix is the path of a tenant, before its name.
const tenantPrefix = "/v1/tenants/"

// segmentRoute answers path, a route whose last segment names what it
// acts on (/v1/tenants/{tenant}, /v1/bulk/{id}): one segment, or no route.
func (s *server) segmentRoute(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("rest")
		if name == "" || strings.Contains(name, "/") {
			writeProblem(w, r, problem(http.StatusNotFound, "not_found", "no route %s", r.URL.Path))
			return
		}
		s.dispatch(w, r, name, path)
	}
}

func (s *server) tenants(w http.ResponseWriter, r *http.Request, _ string) {
	v, err := s.cfg.Tenants.Tenants(r.Context(), boundTenant(r))
	s.reply(w, r, "", v, err)
}

func (s *server) tenant(w http.ResponseWriter, r *http.Request, name string) {
	if err := thread.CheckTenant(name); err != nil {
		s.fail(w, r, "", err)
		return
	}
	if b := boundTenant(r); b != "" && b != name {
		writeProblem(w, r, tenantNotFound(name))
		return
	}
	v, err := s.cfg.Tenants.Tenant(r.Context(), name, boundTenant(r) == name)
	if err != nil {
		s.tenantFail(w, r, name, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *server) setTenant(w http.ResponseWriter, r *http.Request, name string) {
	if boundTenant(r) != "" {
		writeProblem(w, r, tenantForbidden("a token bound to a tenant administers no tenant, its own included"))
		return
	}
	if err := thread.CheckTenant(name); err != nil {
		s.fail(w, r, "", err)
		return
	}
	var body json.RawMessage
	if !decode(w, r, &body, false) {
		return
	}
	v, err := s.cfg.Tenants.SetTenant(r.Context(), name, body)
	if err != nil {
		s.tenantFail(w, r, name, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *server) admission(w http.ResponseWriter, r *http.Request, _ string) {
	v, err := s.cfg.Tenants.Admission(r.Context(), boundTenant(r))
	s.reply(w, r, "", v, err)
}

// startAdmission reads what a start asks of admission beside its body:
// the Idempotency-Key, and, for a bound caller, refuses a body tenant
// that is not its own (tenant_forbidden); false when it answered.
func (s *server) startAdmission(w http.ResponseWriter, r *http.Request, bodyTenant string) (string, bool) {
	if b := boundTenant(r); b != "" && bodyTenant != "" && bodyTenant != b {
		writeProblem(w, r, tenantForbidden("this token starts runs in its own tenant only"))
		return "", false
	}
	key, err := idempotencyKey(r)
	if err != nil {
		s.fail(w, r, "", err)
		return "", false
	}
	return key, true
}
