package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// listData is the list page.
type listData struct {
	Counts    []statusCount
	Total     int64
	Status    string
	Directive string
	Tenant    string // one tenant's runs only; "" for every tenant's
	// Tag is the tag filter as typed (key=value, several separated by
	// spaces: runs that carry all), Tags it read.
	Tag   string
	Tags  map[string]string
	Limit int
	// Cursor is the page's (?cursor=), Next the next page's URL ("" on
	// the last page).
	Cursor    string
	Next      string
	Threads   []*spooltype.Record
	Truncated bool
	Live      bool // some thread shown has not finished
	// Queues are spool's asynq queues; QueuesErr says why they are not
	// shown.
	Queues    []queueRow
	QueuesErr string
	Errored   int64 // threads in error, beside asynq's failed tasks
	// Bulk: the bulk actions are offered on this filtered list (a filter
	// is set and the monitor is not read-only).
	Bulk bool
}

type statusCount struct {
	Status thread.Status
	N      int64
}

// listQuery reads the list page's filters (?status=, ?directive=,
// ?tenant=, ?limit=) into d; a bad one is an error to show.
func (m *Monitor) listQuery(q url.Values, d *listData) error {
	d.Status, d.Directive, d.Tenant, d.Limit = q.Get("status"), strings.TrimSpace(q.Get("directive")), strings.TrimSpace(q.Get("tenant")), m.cfg.ListLimit
	if d.Status != "" && !thread.Status(d.Status).Valid() {
		return fmt.Errorf("status %q: want one of created, running, waiting, paused, completed, error, cancelled, continued", d.Status)
	}
	if d.Tenant != "" && thread.CheckTenant(d.Tenant) != nil {
		return fmt.Errorf("tenant %q: not a tenant name", d.Tenant)
	}
	d.Tag, d.Cursor = strings.TrimSpace(q.Get("tag")), q.Get("cursor")
	tags, err := thread.ParseTags(strings.Fields(d.Tag))
	if err != nil {
		return err
	}
	d.Tags = tags
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			return fmt.Errorf("limit %q: want a number from 1 to %d", s, maxListLimit)
		}
		d.Limit = n
	}
	return nil
}

func (m *Monitor) serveList(w http.ResponseWriter, r *http.Request) {
	var d listData
	if err := m.listQuery(r.URL.Query(), &d); err != nil {
		m.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	status, limit := d.Status, d.Limit
	ctx := r.Context()
	counts, err := m.countThreads(ctx)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	f := orchestrator.Filter{Status: thread.Status(status), Directive: d.Directive, Tenant: d.Tenant, Tags: d.Tags, Limit: limit}
	if d.Cursor != "" {
		cur, err := orchestrator.ParseCursor(d.Cursor)
		if err != nil {
			m.errorPage(w, r, http.StatusBadRequest, err.Error())
			return
		}
		f.After = &cur
	}
	recs, next, err := m.cfg.Orch.ThreadsPage(ctx, f)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d.Total = counts.Total
	if next != "" {
		q := r.URL.Query()
		q.Set("cursor", next)
		d.Truncated, d.Next = true, "/?"+q.Encode()
	}
	d.Threads = recs
	d.Bulk = !m.cfg.ReadOnly && len(recs) > 0 && d.filtered()
	for _, s := range Statuses {
		d.Counts = append(d.Counts, statusCount{s, counts.By[s]})
	}
	for _, rec := range recs {
		if !rec.Status.Terminal() {
			d.Live = true
		}
		rec.Cost.Spend = m.cfg.Orch.RunSpend(ctx, rec) // a graph run's: its subtree's
	}
	d.Errored = counts.By[thread.StatusError]
	if d.Queues, err = m.queueRows(); err != nil {
		d.QueuesErr = err.Error()
	}
	title := "Threads"
	if status != "" {
		title = status + " threads"
	}
	m.render(w, r, http.StatusOK, m.pages.list, page{Title: title, Nav: "threads", Data: d})
}

// fail reports an internal error.
func (m *Monitor) fail(w http.ResponseWriter, r *http.Request, err error) {
	m.cfg.Logger.Error("monitor: request failed", "path", r.URL.Path, "error", err)
	if strings.HasPrefix(r.URL.Path, "/api/") {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	m.errorPage(w, r, http.StatusInternalServerError, err.Error())
}

// lookupFailed answers a request whose thread could not be read (404 for
// an unknown id, as JSON under /api/) and reports whether it did.
func (m *Monitor) lookupFailed(w http.ResponseWriter, r *http.Request, id string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, orchestrator.ErrNotFound) && strings.HasPrefix(r.URL.Path, "/api/"):
		jsonError(w, http.StatusNotFound, fmt.Sprintf("thread %q not found", id))
	case errors.Is(err, orchestrator.ErrNotFound):
		m.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("thread %q not found", id))
	default:
		m.fail(w, r, err)
	}
	return true
}

func (m *Monitor) serveThreadPages(w http.ResponseWriter, r *http.Request) {
	rest := r.PathValue("rest")
	if id, ok := strings.CutSuffix(rest, "/transcript"); ok {
		m.serveTranscript(w, r, id)
		return
	}
	if id, ok := strings.CutSuffix(rest, "/timeline"); ok {
		m.serveTimeline(w, r, id)
		return
	}
	m.serveThread(w, r, strings.TrimSuffix(rest, "/"))
}

// threadPage is the thread page: the view, and what its actions need.
type threadPage struct {
	*ThreadView
	// Approvals are the thread's calls waiting for a decision.
	Approvals []approvalForm
	// CanSign: cancel and resume are possible here (they sign).
	CanSign bool
	// Named: the basic auth user acts; otherwise the forms ask who.
	Named bool
	// ReadOnly: no action is offered (Config.ReadOnly).
	ReadOnly bool
	Task     threadTask
	// AdmissionWait says where the run waits when admission holds it
	// ("concurrency per_leaf=t/leaf (1 of 1 running, 2nd in line, 3 s)"),
	// as `thread show` says it; "" otherwise.
	AdmissionWait string
}

func (m *Monitor) serveThread(w http.ResponseWriter, r *http.Request, id string) {
	v, err := m.threadView(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	p := threadPage{ThreadView: v, CanSign: m.cfg.Orch.CanSign(), ReadOnly: m.cfg.ReadOnly,
		Task: m.threadTask(v.Thread), AdmissionWait: m.cfg.Orch.AdmissionWaitLine(r.Context(), v.Thread)}
	_, _, p.Named = r.BasicAuth()
	if v.Thread.WaitingFor == orchestrator.WaitingForApproval {
		calls, err := m.cfg.Orch.Approvals(r.Context(), id)
		if err != nil {
			m.fail(w, r, err)
			return
		}
		p.Approvals = m.approvalForms(r, calls, "/threads/"+pathOf(id))
	}
	if v.Thread.IsGraph() {
		m.serveGraph(w, r, p)
		return
	}
	m.render(w, r, http.StatusOK, m.pages.thread, page{Title: v.Thread.Directive + " · " + string(v.Thread.Status), Data: p})
}

// transcriptData is the transcript page.
type transcriptData struct {
	Thread  *spooltype.Record
	Events  []template.HTML
	Shown   int   // events with HTML
	Next    int64 // seq of the last event read
	Done    bool
	Warning string
	// Unverified: the monitor has no public key, so no signature was
	// checked (hash chains and sequence were).
	Unverified bool
}

// threadTranscript reads a thread's record, then its transcript's
// events; bad is why the transcript stops short (it failed verification).
// The status is read before the transcript: a thread that had finished
// then has every segment committed by the time the read lists them.
func (m *Monitor) threadTranscript(ctx context.Context, id string) (rec *spooltype.Record, evs []transcript.Event, bad, err error) {
	if rec, err = m.cfg.Orch.Record(ctx, id); err != nil {
		return nil, nil, nil, err
	}
	evs, bad, err = m.transcripts.read(ctx, id)
	return rec, evs, bad, err
}

func (m *Monitor) serveTranscript(w http.ResponseWriter, r *http.Request, id string) {
	rec, evs, bad, err := m.threadTranscript(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	d := transcriptData{Thread: rec, Done: rec.Status.Terminal() || bad != nil, Unverified: m.cfg.Orch.Unverified()}
	if bad != nil {
		d.Warning = bad.Error()
	}
	for _, ev := range evs {
		h, err := m.pages.renderEvent(ev)
		if err != nil {
			m.fail(w, r, err)
			return
		}
		if h != "" {
			d.Events = append(d.Events, h)
		}
		d.Next = ev.Seq
	}
	d.Shown = len(d.Events)
	m.render(w, r, http.StatusOK, m.pages.transcript, page{Title: "Transcript · " + rec.Directive, Data: d})
}

func (m *Monitor) serveThreadAPI(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimSuffix(r.PathValue("rest"), "/")
	if id, ok := strings.CutSuffix(rest, "/events"); ok {
		m.serveEvents(w, r, id)
		return
	}
	if id, ok := strings.CutSuffix(rest, "/timeline"); ok {
		m.serveTimelineJSON(w, r, id)
		return
	}
	if id, ok := strings.CutSuffix(rest, "/deltas"); ok {
		m.serveDeltas(w, r, id)
		return
	}
	v, err := m.threadView(r.Context(), rest)
	if m.lookupFailed(w, r, rest, err) {
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// Events is the response of /api/threads/ID/events.
type Events struct {
	ThreadID string        `json:"thread_id"`
	Status   thread.Status `json:"status"`
	After    int64         `json:"after"`
	// Next is the seq to ask after next time: the last event's, or After.
	Next int64 `json:"next"`
	// Done: the thread has finished and every event is in, or its
	// transcript failed verification; polling can stop.
	Done   bool        `json:"done"`
	Events []EventJSON `json:"events"`
	// Warning says why the transcript stops short: it failed verification.
	Warning string `json:"warning,omitempty"`
	// Unverified: the monitor was given no public key, so the events'
	// signatures were not checked (their hash chain and sequence were).
	Unverified bool `json:"unverified,omitempty"`
}

// EventJSON is a transcript event with its rendering ("" for events the
// page does not show: token deltas, tool starts, checkpoints).
type EventJSON struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"event_type"`
	Timestamp time.Time       `json:"timestamp"`
	Payload   json.RawMessage `json:"payload"`
	HTML      template.HTML   `json:"html"`
}

func (m *Monitor) serveEvents(w http.ResponseWriter, r *http.Request, id string) {
	var aft int64
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("after %q: want a sequence number ≥ 0", s))
			return
		}
		aft = n
	}
	rec, evs, bad, err := m.threadTranscript(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	out := Events{ThreadID: id, Status: rec.Status, After: aft, Next: aft, Done: rec.Status.Terminal() || bad != nil, Events: []EventJSON{},
		Unverified: m.cfg.Orch.Unverified()}
	if bad != nil {
		out.Warning = bad.Error()
	}
	for _, ev := range after(evs, aft) {
		h, err := m.pages.renderEvent(ev)
		if err != nil {
			m.fail(w, r, err)
			return
		}
		out.Events = append(out.Events, EventJSON{Seq: ev.Seq, Type: ev.Type, Timestamp: ev.Timestamp, Payload: ev.Payload, HTML: h})
		out.Next = ev.Seq
	}
	writeJSON(w, http.StatusOK, out)
}
