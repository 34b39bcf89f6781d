package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/spool-run/spool/orchestrator"
)

// DecisionLink is what GET /v1/approvals/decide answers: the decision a
// one-time link carries and the call it decides.
type DecisionLink struct {
	Decision string                   `json:"decision"`
	Call     orchestrator.PendingCall `json:"call"`
}

// DecisionLinkRequest is the optional body of POST /v1/approvals/decide.
type DecisionLinkRequest struct {
	// Reason is required by a deny link: the model gets it as the call's
	// error.
	Reason string `json:"reason,omitempty"`
}

// decisionLink serves the one-time approve and deny links of the approval
// webhook (orchestrator.DecisionLinks) when notify.links names this API:
// GET answers the call the link decides, deciding nothing (a link preview
// or a mail scanner that fetches the link changes nothing); POST decides it
// with orchestrator.DecideByToken, recorded as by "link". The signed token
// is the credential, so this path is outside the API's authentication;
// cross-origin POSTs are refused all the same. A person clicking a link
// in a mail is better served by the monitor's page at the same path.
func (s *server) decisionLink(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodPost) {
		return
	}
	ctx := r.Context()
	token := r.URL.Query().Get("token")
	tok, err := s.cfg.Orch.VerifyDecisionToken(ctx, token)
	if errors.Is(err, orchestrator.ErrBadToken) {
		writeProblem(w, r, problem(http.StatusForbidden, "forbidden", "%s", err.Error()))
		return
	}
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	if r.Method == http.MethodPost {
		var b DecisionLinkRequest
		if !decode(w, r, &b, true) {
			return
		}
		if tok.Decision == orchestrator.DecisionDeny && !required(w, r, b.Reason, reasonRequired) {
			return
		}
		res, err := s.cfg.Orch.DecideByToken(ctx, token, strings.TrimSpace(b.Reason))
		s.reply(w, r, tok.ThreadID, res, err)
		return
	}
	call, err := s.cfg.Orch.LinkedCall(ctx, tok)
	if err != nil {
		s.fail(w, r, tok.ThreadID, err)
		return
	}
	if call != nil {
		writeJSON(w, http.StatusOK, DecisionLink{Decision: tok.Decision, Call: *call})
		return
	}
	writeProblem(w, r, problem(http.StatusConflict, "not_pending",
		"call %s of %s waits for no decision (decided already, or the thread moved on)", tok.CallID, tok.ThreadID))
}
