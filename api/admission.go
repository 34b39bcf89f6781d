package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// admissionTenants is the TenantService of package admission: each
// tenant's standing and settings (spooltype.Tenant, as `spool tenant
// show --json` prints it), its overrides set with PATCH as `spool tenant
// set` sets them, and the published policy.
type admissionTenants struct{ o *orchestrator.Orchestrator }

// AdmissionTenants is the tenant routes' TenantService of admission.
func AdmissionTenants(o *orchestrator.Orchestrator) TenantService { return admissionTenants{o: o} }

func (t admissionTenants) Tenants(ctx context.Context, bound string) (any, error) {
	if bound != "" {
		one, err := t.o.BoundTenantStatus(ctx, bound)
		if err != nil {
			return nil, err
		}
		return []*spooltype.Tenant{one}, nil
	}
	return t.o.TenantStatuses(ctx)
}

func (t admissionTenants) Tenant(ctx context.Context, tenant string, own bool) (any, error) {
	if own {
		return t.o.BoundTenantStatus(ctx, tenant)
	}
	v, err := t.o.TenantStatus(ctx, tenant)
	if isTenantNotFound(err) {
		return nil, ErrTenantNotFound
	}
	return v, err
}

// SetTenant applies a PATCH body: the fields of `spool tenant set`
// (weight, priority, max_running, spend_per_day, spend_per_month,
// starts_per_minute, runs_in_flight, on_exhausted; a number or a
// string each) and "clear", the settings whose overrides to drop.
func (t admissionTenants) SetTenant(ctx context.Context, tenant string, body json.RawMessage) (any, error) {
	set, cleared, p := tenantPatch(body)
	if p != nil {
		return nil, p
	}
	if _, err := admission.ParseOverrides(set); err != nil {
		return nil, problem(http.StatusBadRequest, "bad_request", "%v", err)
	}
	if err := orchestrator.CheckTenantFields(cleared); err != nil {
		return nil, problem(http.StatusBadRequest, "bad_request", "%v", err)
	}
	return t.o.SetTenant(ctx, tenant, set, cleared)
}

// tenantPatch reads a PATCH body into the overrides it sets and the
// fields it clears; a problem for a field that is no setting's.
func tenantPatch(body json.RawMessage) (map[string]string, []string, *Problem) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, nil, problem(http.StatusBadRequest, "bad_request", "the body is not a JSON object of a tenant's settings")
	}
	set := map[string]string{}
	var cleared []string
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		if k == "clear" {
			if err := json.Unmarshal(v, &cleared); err != nil {
				return nil, nil, problem(http.StatusBadRequest, "bad_request", "clear: want a list of settings")
			}
			continue
		}
		if !isField(k) {
			return nil, nil, problem(http.StatusBadRequest, "bad_request", "%s: %s", k, admission.UnknownSetting(k, "clear"))
		}
		set[k] = scalar(v)
	}
	return set, cleared, nil
}

func isField(f string) bool {
	for _, k := range admission.Fields {
		if k == f {
			return true
		}
	}
	return false
}

// scalar is a JSON scalar as the text `tenant set` takes: a string's
// contents, a number's digits.
func scalar(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var f float64
	if json.Unmarshal(v, &f) == nil {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return string(v)
}

func (t admissionTenants) Admission(ctx context.Context, bound string) (any, error) {
	return runTenants(t).Admission(ctx, bound)
}

// isTenantNotFound reports whether err says a tenant does not exist.
func isTenantNotFound(err error) bool {
	return errors.Is(err, &thread.AdmissionError{Code: thread.CodeTenantNotFound})
}
