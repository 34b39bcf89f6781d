package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// childStarter starts the children a thread's calls ask for: a
// thread_directive call's child thread, a run_graph call's graph run.
// Each child's id is planned from (thread, turn, call): a turn that runs
// again (its checkpoint failed: a failover, a store outage past
// patience, a crash) starts nothing twice but adopts the child the first
// run started (orchestrator.StartRequest.Planned). The id's time is the
// thread's registration, not its first claim: a failover can lose the
// claim (and the run again claims at another time), never the
// registration of a thread that runs. A refusal (a limit, a directive or
// graph not found) is the call's answer, which the model reads; an
// infrastructure failure is the activation's (isInfra).
type childStarter struct {
	o       *orchestrator.Runtime
	rec     *registry.Record
	tracer  *turnTracer
	log     *slog.Logger
	metrics *Metrics
}

// childStart is how a call that starts a child ended: the events to
// record, then either the call's answer (text, isError) or the pending
// call the thread waits on (a sync start: it suspends at the end of the
// turn and the child's result is the call's result when it wakes).
type childStart struct {
	spawned *transcript.ChildSpawned
	refused *transcript.ChildRefused
	text    string
	isError bool
	pending *pending
}

// answered is a childStart that answers the call with text.
func answered(text string, isError bool) childStart { return childStart{text: text, isError: isError} }

// answeredJSON is a childStart that answers the call with v as JSON.
func answeredJSON(v any, isError bool) childStart {
	b, _ := json.Marshal(v)
	return answered(string(b), isError)
}

// startChild runs a call of tool (thread_directive, run_graph) and
// records how it ended.
func (s *session) startChild(ctx context.Context, call thread.ToolCall, tool string) error {
	c := childStarter{o: s.o, rec: s.rec, tracer: s.tracer, log: s.log, metrics: s.w.metrics}
	seed := fmt.Sprintf("turn/%d/call/%d", s.st.Turn, s.msgs.callIndex(call.ID))
	var cs childStart
	var err error
	if tool == runGraphID {
		cs, err = c.graph(ctx, call, seed)
	} else {
		cs, err = c.thread(ctx, call, seed)
	}
	if err != nil {
		return err
	}
	if cs.refused != nil {
		s.emit(transcript.TypeChildRefused, *cs.refused)
	}
	if cs.spawned != nil {
		s.emit(transcript.TypeChildSpawned, *cs.spawned)
	}
	if cs.pending != nil {
		s.st.Pending = append(s.st.Pending, *cs.pending)
		return nil
	}
	s.toolResult(call.ID, tool, cs.text, cs.isError, "")
	return nil
}

// thread starts the child thread a thread_directive call asks for, under
// the id planned from seed.
func (c childStarter) thread(ctx context.Context, call thread.ToolCall, seed string) (childStart, error) {
	var p spawnParams
	if err := json.Unmarshal(call.Input, &p); err != nil {
		return answered("bad thread_directive parameters: "+err.Error(), true), nil
	}
	name := p.DirectiveName
	if name == "" {
		name = p.DirectiveID
	}
	if name == "" {
		return answered("thread_directive needs directive_name", true), nil
	}
	inputs, err := decodeInputs(p.Inputs)
	if err != nil {
		return answered(err.Error(), true), nil
	}
	overrides, err := thread.LimitsFromMap(p.LimitOverrides)
	if err != nil {
		return answered("limit_overrides: "+err.Error(), true), nil
	}
	sctx, span := c.tracer.startSpawn(ctx, name, p.Async)
	planned := c.o.PlannedID(orchestrator.IDRequest{Directive: name, ParentID: c.rec.ThreadID}, c.rec.CreatedAt, seed)
	fault("thread:before_spawn")
	rec, err := c.o.Start(sctx, orchestrator.StartRequest{
		Directive: name, Inputs: inputs, Model: p.Model, LimitOverrides: overrides, ParentID: c.rec.ThreadID, Reserve: p.Reserve,
		ID: planned, Planned: true,
	})
	endSpawn(span, rec, err)
	if err != nil {
		if isInfra(err) {
			return childStart{}, err
		}
		c.log.Info("spawn refused", "directive", name, "error", err)
		return c.refused(name, err, errorObject(err)), nil
	}
	fault("thread:after_spawn")
	cs := childStart{spawned: &transcript.ChildSpawned{ChildID: rec.ThreadID, Directive: name, Async: p.Async,
		DroppedCapabilities: rec.DroppedCapabilities}}
	if p.Async {
		a := answeredJSON(map[string]any{"success": true, "thread_id": rec.ThreadID, "status": "running"}, false)
		cs.text = a.text
		return cs, nil
	}
	cs.pending = &pending{CallID: call.ID, Tool: threadDirectiveID, Kind: "spawn", Threads: []string{rec.ThreadID}}
	return cs, nil
}

// graph starts the graph run a run_graph call asks for, under the id
// planned from seed.
func (c childStarter) graph(ctx context.Context, call thread.ToolCall, seed string) (childStart, error) {
	req, async, problem := runGraphRequest(call.Input)
	if problem != "" {
		return answered(problem, true), nil
	}
	name := req.Directive
	sctx, span := c.tracer.startSpawn(ctx, name, async)
	req.ParentID = c.rec.ThreadID
	req.ID = c.o.PlannedID(orchestrator.IDRequest{Directive: name, ParentID: c.rec.ThreadID}, c.rec.CreatedAt, seed)
	req.Planned = true
	rec, err := c.o.Start(sctx, req)
	endSpawn(span, rec, err)
	if err != nil {
		if isInfra(err) {
			return childStart{}, err
		}
		obj := errorObject(err)
		if errors.Is(err, orchestrator.ErrGraphNotFound) || errors.Is(err, orchestrator.ErrGraphInvalid) {
			obj["code"] = "graph_refused"
		}
		c.log.Info("graph run refused", "graph", name, "error", err)
		return c.refused(name, err, obj), nil
	}
	cs := childStart{spawned: &transcript.ChildSpawned{ChildID: rec.ThreadID, Directive: name, Async: async,
		DroppedCapabilities: rec.DroppedCapabilities}}
	c.log.Info("graph run started", "graph", name, "run_id", rec.ThreadID, "async", async)
	if async {
		a := answeredJSON(map[string]any{"success": true, "run_id": rec.ThreadID, "thread_id": rec.ThreadID, "status": "running"}, false)
		cs.text = a.text
		return cs, nil
	}
	cs.pending = &pending{CallID: call.ID, Tool: runGraphID, Kind: "spawn", Threads: []string{rec.ThreadID}}
	return cs, nil
}

// refused is the end of a call whose start of child name the
// orchestrator refused with err, obj the error the model reads: the
// refusal is recorded (child_refused), and counted when the budget
// refused the child's reserve.
func (c childStarter) refused(name string, err error, obj map[string]any) childStart {
	var le *thread.LimitError
	if errors.As(err, &le) && le.Code == thread.CodeSpendExceeded {
		c.metrics.ledgerRejected("reserve")
	}
	cs := answeredJSON(map[string]any{"success": false, "error": obj}, true)
	cs.refused = &transcript.ChildRefused{Directive: name, Code: obj["code"].(string), Message: err.Error()}
	return cs
}
