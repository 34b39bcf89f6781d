package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// maxBody is the largest request body read (inputs may be large: a
// command line holds 128 KiB, the API more).
const maxBody = 8 << 20

// writeJSON writes v as the response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// fail answers err as a problem, logging what is not the caller's fault.
func (s *server) fail(w http.ResponseWriter, r *http.Request, id string, err error) {
	p := problemOf(err)
	if p.Status >= 500 {
		s.log.ErrorContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "thread_id", id, "error", err)
	}
	writeProblem(w, r, p)
}

// decode reads a JSON body into v (decodeBody); when the body is refused
// it writes the problem and returns false.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	if p := decodeBody(w, r, v, optional); p != nil {
		writeProblem(w, r, p)
		return false
	}
	return true
}

// badRequest writes a 400 bad_request problem.
func badRequest(w http.ResponseWriter, r *http.Request, format string, args ...any) {
	writeProblem(w, r, problem(http.StatusBadRequest, "bad_request", format, args...))
}

// required reports whether v is not blank; when it is, it answers 400
// with msg.
func required(w http.ResponseWriter, r *http.Request, v, msg string) bool {
	if strings.TrimSpace(v) != "" {
		return true
	}
	badRequest(w, r, "%s", msg)
	return false
}

// fieldHint is " (did you mean \"inputs\"?)" for an unknown field of a
// body decoded into v that is a likely misspelling of one of its fields
// (at any depth: encoding/json does not say where the field was).
func fieldHint(err error, v any) string {
	rest, ok := strings.CutPrefix(err.Error(), `json: unknown field "`)
	if !ok {
		return ""
	}
	name := strings.TrimSuffix(rest, `"`)
	if near := spelling.Nearest(name, jsonFields(reflect.TypeOf(v), map[reflect.Type]bool{})); near != "" && near != name {
		return fmt.Sprintf(" (did you mean %q?)", near)
	}
	return ""
}

// jsonFields are the JSON names of the fields of the structs t holds.
func jsonFields(t reflect.Type, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return nil
	}
	seen[t] = true
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
			continue
		case f.Anonymous && name == "":
			out = append(out, jsonFields(f.Type, seen)...)
			continue
		case name == "":
			name = f.Name
		}
		out = append(append(out, name), jsonFields(f.Type, seen)...)
	}
	return out
}

// decodeBody reads a JSON body into v, refusing unknown fields, trailing
// data and a body that is not JSON. An empty body leaves v as it is when
// optional.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) *Problem {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return problem(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type %q: want application/json", ct)
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return problem(http.StatusRequestEntityTooLarge, "body_too_large", "the body is larger than %d bytes", tooBig.Limit)
	}
	if err != nil {
		return problem(http.StatusBadRequest, "bad_request", "read the body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if optional {
			return nil
		}
		return problem(http.StatusBadRequest, "bad_request", "the body is empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return problem(http.StatusBadRequest, "bad_request", "the body is not the JSON object wanted: %v%s", err, fieldHint(err, v))
	}
	if dec.More() {
		return problem(http.StatusBadRequest, "bad_request", "the body has data after its JSON object")
	}
	return nil
}

// reply answers an operation: v as JSON, or err as a problem.
func (s *server) reply(w http.ResponseWriter, r *http.Request, id string, v any, err error) {
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// onThread answers an operation on thread id: 404 when there is no such
// thread, else what op returns (reply).
func (s *server) onThread(w http.ResponseWriter, r *http.Request, id string, op func(ctx context.Context, rec *spooltype.Record) (any, error)) {
	rec := s.record(w, r, id)
	if rec == nil {
		return
	}
	v, err := op(r.Context(), rec)
	s.reply(w, r, id, v, err)
}

// record returns thread id's record, or answers 404 (or 500). Another
// tenant's run, for a caller bound to a tenant, is answered exactly as an
// id that does not exist.
func (s *server) record(w http.ResponseWriter, r *http.Request, id string) *spooltype.Record {
	rec, err := s.cfg.Orch.Record(r.Context(), id)
	if err == nil && !visible(r, rec) {
		err = orchestrator.ErrNotFound
	}
	if errors.Is(err, orchestrator.ErrNotFound) {
		writeProblem(w, r, problem(http.StatusNotFound, "not_found", "thread %q not found", id))
		return nil
	}
	if err != nil {
		s.fail(w, r, id, err)
		return nil
	}
	return rec
}

// threadURL is the path of thread id, escaped.
func threadURL(id string) string { return "/v1/threads/" + url.PathEscape(id) }

// callerTrace is the request's W3C traceparent header when it is one: a
// thread started with it joins the caller's trace (its span is a child of
// the caller's). Anything else is ignored, as the W3C recommendation says,
// and the thread starts a trace of its own.
func callerTrace(r *http.Request) string {
	tp := r.Header.Get("traceparent")
	if _, ok := telemetry.Parse(tp); !ok {
		return ""
	}
	return tp
}

// runBody is RunRequest as the server reads it: limits as a map, so that
// each is checked as `--limit k=v` is (thread.LimitsFromMap).
type runBody struct {
	Directive string            `json:"directive"`
	Inputs    map[string]any    `json:"inputs"`
	Model     string            `json:"model"`
	Limits    map[string]any    `json:"limits"`
	Parent    string            `json:"parent"`
	Queue     string            `json:"queue"`
	Tenant    string            `json:"tenant"`
	Priority  int               `json:"priority"`
	Tags      map[string]string `json:"tags"`
	Notify    string            `json:"notify"`
}

func (s *server) run(w http.ResponseWriter, r *http.Request, _ string) {
	var b runBody
	if !decode(w, r, &b, false) || !required(w, r, b.Directive, "directive is required") {
		return
	}
	name := strings.TrimSuffix(b.Directive, ".md")
	if _, err := directive.CleanName(name); err != nil {
		badRequest(w, r, "%v", err)
		return
	}
	limits, err := thread.LimitsFromMap(b.Limits)
	if err != nil {
		badRequest(w, r, "limits: %v", err)
		return
	}
	if b.Inputs == nil {
		b.Inputs = map[string]any{}
	}
	key, ok := s.startAdmission(w, r, b.Tenant)
	if !ok {
		return
	}
	started, err := launch.Start(r.Context(), s.cfg.Orch, launch.Request{Project: s.cfg.Project, UserDir: s.cfg.UserDir, Logger: s.log,
		Scope: boundTenant(r),
		StartRequest: orchestrator.StartRequest{Directive: name, Inputs: b.Inputs, Model: b.Model, LimitOverrides: limits,
			ParentID: b.Parent, Queue: b.Queue, TraceParent: callerTrace(r), Tenant: b.Tenant, Priority: b.Priority,
			IdempotencyKey: key, Tags: b.Tags, Notify: b.Notify, Surface: orchestrator.SurfaceAPI}})
	if err != nil {
		s.fail(w, r, b.Parent, err)
		return
	}
	rec := started.Record
	if started.MissingKey != "" {
		s.log.Info("the thread's model needs a provider key this process does not have; workers hold the keys",
			"thread_id", rec.ThreadID, "model", started.Model, "key", started.MissingKey)
	}
	writeStarted(w, threadURL(rec.ThreadID), rec)
}

func (s *server) list(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	f := orchestrator.Filter{Status: thread.Status(q.Get("status")), Directive: q.Get("directive"), Parent: q.Get("parent"), Limit: s.cfg.ListLimit}
	s.listRuns(w, r, f)
}

// listRuns answers a list of runs that match f, with the request's
// status, limit and tenant parameters.
func (s *server) listRuns(w http.ResponseWriter, r *http.Request, f orchestrator.Filter) {
	q := r.URL.Query()
	if f.Status != "" && !f.Status.Valid() {
		badRequest(w, r, "status %q: want one of created, running, waiting, paused, completed, error, cancelled, continued", f.Status)
		return
	}
	if wf := q.Get("waiting_for"); wf != "" {
		if err := orchestrator.CheckWaitingFor(wf); err != nil {
			badRequest(w, r, "%v", err)
			return
		}
		f.WaitingFor = wf
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxListLimit {
			badRequest(w, r, "limit %q: want 1 to %d", l, MaxListLimit)
			return
		}
		f.Limit = n
	}
	var ok bool
	if f.Tenant, ok = s.listTenant(w, r); !ok {
		return
	}
	if err := orchestrator.ListRange(&f, q["tag"], q.Get("since"), q.Get("until"), q.Get("cursor")); err != nil {
		badRequest(w, r, "%v", err)
		return
	}
	recs, next, err := s.cfg.Orch.ThreadsPage(r.Context(), f)
	if recs == nil {
		recs = []*spooltype.Record{}
	}
	for _, rec := range recs {
		rec.Cost.Spend = s.cfg.Orch.RunSpend(r.Context(), rec) // a graph run's: its subtree's, as its show gives it
	}
	if next != "" {
		// The body stays the list; the next page is a header away.
		nq := r.URL.Query()
		nq.Set("cursor", next)
		w.Header().Set("X-Next-Cursor", next)
		w.Header().Set("Link", fmt.Sprintf("<%s?%s>; rel=\"next\"", r.URL.Path, nq.Encode()))
	}
	s.reply(w, r, "", recs, err)
}

func (s *server) show(w http.ResponseWriter, r *http.Request, id string) {
	if rec := s.record(w, r, id); rec != nil {
		writeJSON(w, http.StatusOK, rec)
	}
}

func (s *server) tree(w http.ResponseWriter, r *http.Request, id string) {
	s.onThread(w, r, id, func(ctx context.Context, rec *spooltype.Record) (any, error) {
		return s.cfg.Orch.Tree(ctx, rec, s.cfg.MaxTreeNodes)
	})
}

func (s *server) chain(w http.ResponseWriter, r *http.Request, id string) {
	s.onThread(w, r, id, func(ctx context.Context, _ *spooltype.Record) (any, error) {
		return s.cfg.Orch.GetChain(ctx, id)
	})
}

func (s *server) budget(w http.ResponseWriter, r *http.Request, id string) {
	s.onThread(w, r, id, func(ctx context.Context, rec *spooltype.Record) (any, error) {
		return s.cfg.Orch.ThreadBudget(ctx, rec)
	})
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request, id string) {
	var b CancelRequest
	if !decode(w, r, &b, true) {
		return
	}
	cascade := b.Cascade == nil || *b.Cascade
	s.onThread(w, r, id, func(ctx context.Context, _ *spooltype.Record) (any, error) {
		return s.cfg.Orch.CancelChain(ctx, id, cascade)
	})
}

func (s *server) resume(w http.ResponseWriter, r *http.Request, id string) {
	var b ResumeRequest
	if !decode(w, r, &b, false) || !required(w, r, b.Message, "message is required") {
		return
	}
	if s.record(w, r, id) == nil {
		return
	}
	res, err := s.cfg.Orch.Resume(r.Context(), id, b.Message)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	w.Header().Set("Location", threadURL(res.NewThreadID))
	writeJSON(w, http.StatusCreated, res)
}

// cost answers `spool cost report` (orchestrator.CostReport): ?by=
// (directive, model, tenant, day, tag:KEY; default directive) over the
// runs that ?directive=, ?tenant=, ?tag=, ?since= and ?until= select; a
// bound token's tenant's runs only.
func (s *server) cost(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	by := q.Get("by")
	if by == "" {
		by = "directive"
	}
	if err := orchestrator.CheckCostKey(by); err != nil {
		badRequest(w, r, "by %q: want directive, model, tenant, day or tag:KEY", by)
		return
	}
	f := orchestrator.Filter{Directive: q.Get("directive")}
	var ok bool
	if f.Tenant, ok = s.listTenant(w, r); !ok {
		return
	}
	if err := orchestrator.ListRange(&f, q["tag"], q.Get("since"), q.Get("until"), ""); err != nil {
		badRequest(w, r, "%v", err)
		return
	}
	rep, err := s.cfg.Orch.CostReport(r.Context(), by, f)
	s.reply(w, r, "", rep, err)
}
