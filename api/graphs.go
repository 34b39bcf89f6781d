package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Graph runs (`spool graph`): a run is a registry record of kind graph,
// so the thread routes take run ids too (events, tree, budget, approve,
// deny); these are the operations only a run has.

// graphPrefix is the path of a graph run, before its id.
const graphPrefix = "/v1/graphs/"

// graphURL is the path of run id, escaped.
func graphURL(id string) string { return graphPrefix + url.PathEscape(id) }

// The bodies of the graph routes (package spooltype).
type (
	// GraphRunRequest is the body of POST /v1/graphs.
	GraphRunRequest = spooltype.GraphRunRequest
	// GraphRun is the body of GET /v1/graphs/ID: the run's record, its
	// node table and its steps.
	GraphRun = spooltype.GraphRun
	// GraphState is the body of GET /v1/graphs/ID/state.
	GraphState = spooltype.GraphState
	// GraphResumeRequest is the (optional) body of POST
	// /v1/graphs/ID/resume.
	GraphResumeRequest = spooltype.GraphResumeRequest
	// GraphForkRequest is the body of POST /v1/graphs/ID/fork.
	GraphForkRequest = spooltype.GraphForkRequest
)

// graphRecord returns run id's record, or answers 404 when there is no
// such run (or it is a thread's).
func (s *server) graphRecord(w http.ResponseWriter, r *http.Request, id string) *spooltype.Record {
	rec, err := s.cfg.Orch.Record(r.Context(), id)
	if err == nil && !visible(r, rec) {
		err = orchestrator.ErrNotFound // another tenant's run: as if it did not exist
	}
	switch {
	case errors.Is(err, orchestrator.ErrNotFound):
		writeProblem(w, r, problem(http.StatusNotFound, "not_found", "graph run %q not found", id))
		return nil
	case err != nil:
		s.fail(w, r, id, err)
		return nil
	case !rec.IsGraph():
		writeProblem(w, r, problem(http.StatusNotFound, "not_graph", "%s is a thread, not a graph run (GET %s)", id, threadURL(id)))
		return nil
	}
	return rec
}

// graphLimits reads a run's limit overrides: the thread limits
// (thread.LimitsFromMap) and max_steps.
func graphLimits(m map[string]any) (thread.Limits, int, error) {
	rest := map[string]any{}
	maxSteps := 0
	for k, v := range m {
		if k != "max_steps" {
			rest[k] = v
			continue
		}
		f, err := thread.Number(v)
		if err != nil || f < 1 || f > graph.MaxStepsCap || f != float64(int(f)) {
			return thread.Limits{}, 0, fmt.Errorf("limit max_steps %v: want a whole number from 1 to %d", v, graph.MaxStepsCap)
		}
		maxSteps = int(f)
	}
	l, err := thread.LimitsFromMap(rest)
	return l, maxSteps, err
}

func (s *server) runGraph(w http.ResponseWriter, r *http.Request, _ string) {
	var b GraphRunRequest
	if !decode(w, r, &b, false) || !required(w, r, b.Graph, "graph is required") {
		return
	}
	name, err := orchestrator.GraphName(b.Graph)
	if err != nil {
		badRequest(w, r, "%v", err)
		return
	}
	limits, maxSteps, err := graphLimits(b.Limits)
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
		StartRequest: orchestrator.StartRequest{Graph: true, Directive: name, Inputs: b.Inputs, LimitOverrides: limits, MaxSteps: maxSteps,
			ParentID: b.Parent, Queue: b.Queue, TraceParent: callerTrace(r), Tenant: b.Tenant, Priority: b.Priority,
			IdempotencyKey: key, Tags: b.Tags, Notify: b.Notify, Surface: orchestrator.SurfaceAPI}})
	if err != nil {
		s.fail(w, r, b.Parent, err)
		return
	}
	writeStarted(w, graphURL(started.Record.ThreadID), started.Record)
}

// listGraphs is GET /v1/graphs: graph runs, newest first (`spool graph
// list`), by ?status=, ?graph=, ?tenant=, ?limit=.
func (s *server) listGraphs(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	s.listRuns(w, r, orchestrator.Filter{Status: thread.Status(q.Get("status")), Directive: q.Get("graph"), Kind: spooltype.KindGraph, Limit: s.cfg.ListLimit})
}

func (s *server) showGraph(w http.ResponseWriter, r *http.Request, id string) {
	rec := s.graphRecord(w, r, id)
	if rec == nil {
		return
	}
	if !rec.Status.Terminal() {
		// The record's spend is the subtree's at the end; while the run
		// goes on, the ledger's is live.
		if spend, err := s.cfg.Orch.SubtreeSpend(r.Context(), rec); err == nil {
			rec.Cost.Spend = spend
		}
	}
	v, err := s.cfg.Orch.GraphView(r.Context(), rec)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, GraphRun{Record: rec, Nodes: v.Nodes, Steps: v.Steps, WakeAt: v.WakeAt, MessageName: v.MessageName})
}

func (s *server) graphState(w http.ResponseWriter, r *http.Request, id string) {
	step := -1
	if q := r.URL.Query().Get("step"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			badRequest(w, r, "step %q: want a step number ≥ 0 (absent: the last checkpoint's)", q)
			return
		}
		step = n
	}
	rec := s.graphRecord(w, r, id)
	if rec == nil {
		return
	}
	st, at, err := s.cfg.Orch.GraphState(r.Context(), rec, step)
	if errors.Is(err, orchestrator.ErrNoGraphState) {
		writeProblem(w, r, problem(http.StatusNotFound, "step_not_recorded", "%v", err))
		return
	}
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	if st == nil {
		st = map[string]any{}
	}
	writeJSON(w, http.StatusOK, GraphState{RunID: rec.ThreadID, Step: at, State: st})
}

func (s *server) cancelGraph(w http.ResponseWriter, r *http.Request, id string) {
	var b CancelRequest
	if !decode(w, r, &b, true) {
		return
	}
	if s.graphRecord(w, r, id) == nil {
		return
	}
	cascade := b.Cascade == nil || *b.Cascade
	res, err := s.cfg.Orch.CancelChain(r.Context(), id, cascade)
	s.reply(w, r, id, res, err)
}

func (s *server) resumeGraph(w http.ResponseWriter, r *http.Request, id string) {
	var b GraphResumeRequest
	if !decode(w, r, &b, true) {
		return
	}
	if s.graphRecord(w, r, id) == nil {
		return
	}
	cur, err := s.cfg.Orch.ResolveChain(r.Context(), id)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	if last, err := s.cfg.Orch.Record(r.Context(), cur); err == nil && last.Status == thread.StatusCompleted {
		writeProblem(w, r, problem(http.StatusConflict, "not_resumable", "run %s completed: only a run that ended in error or was cancelled "+
			"can be resumed (fork it to run it again from a step: POST %s/fork)", cur, graphURL(cur)))
		return
	}
	res, err := s.cfg.Orch.ResumeGraph(r.Context(), id, orchestrator.GraphResumeRequest{From: b.From, Set: b.Set})
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	w.Header().Set("Location", graphURL(res.NewThreadID))
	writeJSON(w, http.StatusCreated, res)
}

func (s *server) forkGraph(w http.ResponseWriter, r *http.Request, id string) {
	var b GraphForkRequest
	if !decode(w, r, &b, false) {
		return
	}
	if b.AtStep < 1 {
		badRequest(w, r, "at_step is required: the step, from 1, whose checkpoint the fork starts from")
		return
	}
	if s.graphRecord(w, r, id) == nil {
		return
	}
	res, err := s.cfg.Orch.ForkGraph(r.Context(), orchestrator.GraphForkRequest{RunID: id, AtStep: b.AtStep, From: b.From, Set: b.Set})
	var se *orchestrator.StepNotRecordedError
	switch {
	case errors.As(err, &se):
		writeProblem(w, r, problem(http.StatusUnprocessableEntity, "step_not_recorded", "%v", err))
		return
	case errors.Is(err, orchestrator.ErrReleased):
		writeProblem(w, r, problem(http.StatusConflict, "parent_finished", "%v", err))
		return
	case err != nil:
		s.fail(w, r, id, err)
		return
	}
	w.Header().Set("Location", graphURL(res.Run.ThreadID))
	writeJSON(w, http.StatusCreated, res.Run)
}

// sendGraphMessage keeps a message for a graph run's wait_message nodes
// (orchestrator.SendGraphMessage): 200 with what it did (a duplicate id
// too), 422 message_unknown or message_invalid for a name the graph does
// not wait for or data its schema refuses, 409 run_ended.
func (s *server) sendGraphMessage(w http.ResponseWriter, r *http.Request, id string) {
	var b GraphMessageRequest
	if !decode(w, r, &b, false) || !required(w, r, b.Name, "name is required: the message name a wait_message node takes") {
		return
	}
	if s.graphRecord(w, r, id) == nil {
		return
	}
	res, err := s.cfg.Orch.SendGraphMessage(r.Context(), id, orchestrator.GraphMessage{Name: b.Name, Data: b.Data, ID: b.ID, By: who(r, b.By)})
	s.reply(w, r, id, res, err)
}
