package monitor

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// The list page's bulk action: with a filter set, cancel, resume,
// approve or deny every run it selects (orchestrator.StartBulk), behind
// the same confirmation as a single action. The confirmation page says
// how many runs it would act on (a dry run); the confirmed form makes the
// operation and runs it in the background (a scheduler finishes it if
// this process dies), and the list shows its id, which `spool bulk show`
// follows.

// bulkVerbs are the buttons' words for each action.
var bulkVerbs = map[string][2]string{
	orchestrator.BulkCancel:  {"Cancel", "cancelled"},
	orchestrator.BulkResume:  {"Resume", "resumed"},
	orchestrator.BulkApprove: {"Approve", "approved"},
	orchestrator.BulkDeny:    {"Deny", "denied"},
}

func (m *Monitor) serveBulk(w http.ResponseWriter, r *http.Request) {
	if !m.postForm(w, r) {
		return
	}
	action := r.PostFormValue("action")
	verb, ok := bulkVerbs[action]
	if !ok {
		m.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("bulk action %q: want cancel, resume, approve or deny", action))
		return
	}
	var d listData
	if err := m.listQuery(r.PostForm, &d); err != nil {
		m.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	list := "/?" + listValues(d).Encode()
	if !d.filtered() {
		m.redirect(w, r, list, flash{Text: "Narrow the list with a filter first: a bulk action acts on every run the filter selects.", Bad: true})
		return
	}
	if (action == orchestrator.BulkCancel || action == orchestrator.BulkResume) && !m.cfg.Orch.CanSign() {
		m.redirect(w, r, list, flash{Text: noSigner, Bad: true})
		return
	}
	req := orchestrator.BulkRequest{Action: action, Message: r.PostFormValue("message"), By: who(r),
		Filter: orchestrator.BulkFilter{Status: thread.Status(d.Status), Directive: d.Directive, Tenant: d.Tenant, Tags: d.Tags}}
	if r.PostFormValue("confirmed") != "1" {
		m.confirmBulk(w, r, req, d, list)
		return
	}
	started, err := m.cfg.Orch.StartBulk(r.Context(), req)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if started.Matched > 0 {
		go m.runBulk(started.Operation)
	}
	m.redirect(w, r, list, flash{Text: fmt.Sprintf("Operation %s: %d runs to be %s, under way (spool bulk show %s).",
		started.Operation, started.Matched, verb[1], started.Operation)})
}

// confirmBulk answers an unconfirmed bulk action: a confirmation page
// that says how many runs it would act on, or back to the list when none.
func (m *Monitor) confirmBulk(w http.ResponseWriter, r *http.Request, req orchestrator.BulkRequest, d listData, list string) {
	verb := bulkVerbs[req.Action]
	req.DryRun = true
	n, err := m.cfg.Orch.StartBulk(r.Context(), req)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if n.Matched == 0 {
		m.redirect(w, r, list, flash{Text: fmt.Sprintf("No run this filter selects can be %s.", verb[1])})
		return
	}
	fields := [][2]string{{"action", req.Action}}
	for k, vs := range listValues(d) {
		fields = append(fields, [2]string{k, vs[0]})
	}
	sort.Slice(fields[1:], func(i, j int) bool { return fields[1+i][0] < fields[1+j][0] })
	if req.Message != "" {
		fields = append(fields, [2]string{"message", req.Message})
	}
	m.confirm(w, r, confirmData{Question: fmt.Sprintf("%s %d runs?", verb[0], n.Matched), Action: "/bulk", Back: list,
		Button: fmt.Sprintf("%s %d runs", verb[0], n.Matched), Fields: fields,
		Details: append(filterDetails(d), [2]string{"runs", strconv.FormatInt(n.Matched, 10) + " (those the filter selects that can be " + verb[1] + ")"})})
}

// filtered says whether d selects by something: a bulk action needs it.
func (d listData) filtered() bool {
	return d.Status != "" || d.Directive != "" || d.Tenant != "" || len(d.Tags) > 0
}

// runBulk runs operation id to its end in the background.
func (m *Monitor) runBulk(id string) {
	host, _ := os.Hostname()
	op, err := m.cfg.Orch.RunBulk(context.Background(), id, fmt.Sprintf("monitor:%s:%d", host, os.Getpid()), nil)
	if err != nil {
		m.cfg.Logger.Error("bulk operation", "operation", id, "error", err)
		return
	}
	m.cfg.Logger.Info("bulk operation run", "operation", id, "status", op.Status, "done", op.Done, "failed", op.Failed)
}

// listValues is the list page's query of d's filter.
func listValues(d listData) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"status": d.Status, "directive": d.Directive, "tenant": d.Tenant, "tag": d.Tag} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// filterDetails are a confirmation's lines for d's filter.
func filterDetails(d listData) [][2]string {
	var out [][2]string
	for _, kv := range [][2]string{{"status", d.Status}, {"directive", d.Directive}, {"tenant", d.Tenant}, {"tags", d.Tag}} {
		if kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}
