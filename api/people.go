package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// People in the loop: the pending tool calls, decisions on them, and
// messages to a thread's model (orchestrator.Approvals, Decide, Send).

// who is the person a decision or message is recorded as: by, else the
// caller's token's name, else the basic auth user, else "api".
func who(r *http.Request, by string) string {
	if b := strings.TrimSpace(by); b != "" {
		return b
	}
	if n := callerOf(r).name; n != "" {
		return n
	}
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return u
	}
	return "api"
}

func (s *server) approvals(w http.ResponseWriter, r *http.Request, _ string) {
	id := r.URL.Query().Get("thread")
	if id != "" && s.record(w, r, id) == nil {
		return
	}
	tenant, ok := s.listTenant(w, r)
	if !ok {
		return
	}
	calls, err := s.cfg.Orch.Approvals(r.Context(), id)
	if err == nil && tenant != "" {
		calls, err = s.tenantCalls(r.Context(), calls, tenant)
	}
	s.reply(w, r, id, calls, err)
}

// tenantCalls are the calls of calls whose thread is tenant's.
func (s *server) tenantCalls(ctx context.Context, calls []orchestrator.PendingCall, tenant string) ([]orchestrator.PendingCall, error) {
	ids := make([]string, 0, len(calls))
	for _, c := range calls {
		ids = append(ids, c.ThreadID)
	}
	recs, err := s.cfg.Orch.Records(ctx, ids)
	if err != nil {
		return nil, err
	}
	ours := map[string]bool{}
	for _, rec := range recs {
		ours[rec.ThreadID] = rec.TenantOrDefault() == tenant
	}
	out := []orchestrator.PendingCall{}
	for _, c := range calls {
		if ours[c.ThreadID] {
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *server) approve(w http.ResponseWriter, r *http.Request, id string) {
	var b ApproveRequest
	if !decode(w, r, &b, true) {
		return
	}
	s.decide(w, r, id, orchestrator.DecisionApprove, b.CallID, b.RequestID, b.Reason, b.By)
}

// reasonRequired is the refusal of a deny without a reason.
const reasonRequired = "reason is required: the model gets it as the call's error"

func (s *server) deny(w http.ResponseWriter, r *http.Request, id string) {
	var b DenyRequest
	if !decode(w, r, &b, false) || !required(w, r, b.Reason, reasonRequired) {
		return
	}
	s.decide(w, r, id, orchestrator.DecisionDeny, b.CallID, b.RequestID, b.Reason, b.By)
}

// decide decides call (with request: that request of it only) of thread
// id, exactly, or every pending call when call is "".
func (s *server) decide(w http.ResponseWriter, r *http.Request, id, decision, call, request, reason, by string) {
	if request != "" && call == "" {
		writeProblem(w, r, problem(http.StatusBadRequest, "bad_request", "request_id needs the call_id it is a request of"))
		return
	}
	var calls []string
	if call != "" {
		calls = []string{call}
	}
	s.onThread(w, r, id, func(ctx context.Context, _ *spooltype.Record) (any, error) {
		if request != "" {
			return s.cfg.Orch.DecideRequest(ctx, id, call, request, decision, who(r, by), reason)
		}
		return s.cfg.Orch.Decide(ctx, id, calls, decision, who(r, by), reason)
	})
}

func (s *server) send(w http.ResponseWriter, r *http.Request, id string) { s.message(w, r, id, false) }

func (s *server) interrupt(w http.ResponseWriter, r *http.Request, id string) {
	s.message(w, r, id, true)
}

func (s *server) message(w http.ResponseWriter, r *http.Request, id string, interrupt bool) {
	var b SendRequest
	if !decode(w, r, &b, false) || !required(w, r, b.Message, "message is required") {
		return
	}
	s.onThread(w, r, id, func(ctx context.Context, _ *spooltype.Record) (any, error) {
		return s.cfg.Orch.Send(ctx, id, b.Message, who(r, b.By), interrupt)
	})
}
