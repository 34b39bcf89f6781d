package api

import (
	"errors"
	"net/http"

	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/transcript"
)

// fork is POST /v1/threads/ID/fork: `spool thread fork` (orchestrator.Fork).
// A script model is read from the server's project.
func (s *server) fork(w http.ResponseWriter, r *http.Request, id string) {
	var b ForkRequest
	if !decode(w, r, &b, false) {
		return
	}
	if b.AtTurn < 1 {
		badRequest(w, r, "at_turn is required: the turn, from 1, whose end the fork keeps")
		return
	}
	if s.record(w, r, id) == nil {
		return
	}
	script, err := launch.ReadScript(s.cfg.Project, b.Model)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	res, err := s.cfg.Orch.Fork(r.Context(), orchestrator.ForkRequest{ThreadID: id, AtTurn: b.AtTurn, Message: b.Message, Model: b.Model, Script: script})
	var te *transcript.TurnError
	switch {
	case errors.As(err, &te):
		writeProblem(w, r, problem(http.StatusUnprocessableEntity, "turn_not_recorded", "%v", err))
		return
	case errors.Is(err, orchestrator.ErrReleased):
		writeProblem(w, r, problem(http.StatusConflict, "parent_finished", "%v", err))
		return
	case err != nil:
		s.fail(w, r, id, err)
		return
	}
	w.Header().Set("Location", threadURL(res.Thread.ThreadID))
	writeJSON(w, http.StatusCreated, res.Thread)
}
