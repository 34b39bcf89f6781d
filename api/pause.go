package api

import (
	"context"
	"net/http"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// Pause and unpause (orchestrator.Pause, Unpause): POST
// /v1/threads/ID/pause and /unpause, and the same under /v1/graphs/ID
// (which refuses a thread's id as not_graph, as every graph route does).
// The optional body is {tree}: act on the whole tree the run belongs to,
// from its root; without it, on the run (the one its continuation chain
// has reached) and its descendants. The answer is what the request did
// (spooltype.PauseResult); a run that has ended is 409 run_ended, and
// another tenant's run, for a token bound to a tenant, is answered as an
// id that does not exist (404), before anything is done.

// pauseOp is orchestrator.Pause or Unpause.
type pauseOp func(ctx context.Context, id string, tree bool) (*orchestrator.PauseResult, error)

func (s *server) pause(w http.ResponseWriter, r *http.Request, id string) {
	s.pauseThread(w, r, id, s.cfg.Orch.Pause)
}

func (s *server) unpause(w http.ResponseWriter, r *http.Request, id string) {
	s.pauseThread(w, r, id, s.cfg.Orch.Unpause)
}

func (s *server) pauseGraph(w http.ResponseWriter, r *http.Request, id string) {
	s.pauseRun(w, r, id, s.cfg.Orch.Pause)
}

func (s *server) unpauseGraph(w http.ResponseWriter, r *http.Request, id string) {
	s.pauseRun(w, r, id, s.cfg.Orch.Unpause)
}

// pauseThread answers a thread route's pause or unpause of id (a graph
// run's id too, as every thread route takes).
func (s *server) pauseThread(w http.ResponseWriter, r *http.Request, id string, op pauseOp) {
	var b PauseRequest
	if !decode(w, r, &b, true) {
		return
	}
	s.onThread(w, r, id, func(ctx context.Context, _ *spooltype.Record) (any, error) {
		return op(ctx, id, b.Tree)
	})
}

// pauseRun answers a graph route's pause or unpause of run id.
func (s *server) pauseRun(w http.ResponseWriter, r *http.Request, id string, op pauseOp) {
	var b PauseRequest
	if !decode(w, r, &b, true) {
		return
	}
	if s.graphRecord(w, r, id) == nil {
		return
	}
	res, err := op(r.Context(), id, b.Tree)
	s.reply(w, r, id, res, err)
}
