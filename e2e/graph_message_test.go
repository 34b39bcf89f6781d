package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/client"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// inboxGraph takes two messages named item in turn, the first checked
// against a schema, and returns what each carried.
const inboxGraph = `config:
  start: first
  nodes:
    first:
      type: wait_message
      name: item
      schema:
        type: object
        required: [n]
        properties:
          n: {type: integer}
      assign: {a: "${result.data.n}", a_id: "${result.id}"}
      next: second
    second:
      type: wait_message
      name: item
      assign: {b: "${result.data.n}"}
      next: done
    done:
      type: return
      output: {a: "${state.a}", b: "${state.b}", a_id: "${state.a_id}"}
`

// deadlineGraph waits 2 seconds for a message: on timeout it routes to
// late (inputs.route) or fails wait_timeout (the node strict).
const deadlineGraph = `config:
  start: pick
  nodes:
    pick:
      type: gate
      next:
        - when: {path: inputs.route, op: eq, value: true}
          to: patient
        - to: strict
    patient:
      type: wait_message
      name: ping
      timeout: 2s
      on_timeout: late
      next: done
    strict:
      type: wait_message
      name: ping
      timeout: 2s
      next: done
    late:
      type: return
      output: {late: true}
    done:
      type: return
      output: {late: false}
`

// relayGraph starts g/relay, a child thread that sends the run the
// message its wait_message node takes.
const relayGraph = `config:
  start: kick
  nodes:
    kick:
      action: {directive: g/relay, async: true}
      next: await
    await:
      type: wait_message
      name: relayed
      assign: {got: "${result.data.value}", id: "${result.id}"}
      next: done
    done:
      type: return
      output: {got: "${state.got}", id: "${state.id}"}
`

// relayFiles are the g/relay graph, whose permissions grant its child
// the orchestrator tool, and the g/relay directive and its script's
// turns: a message to its parent run through that tool, then its return.
func relayFiles(files map[string]string) map[string]string {
	files[".ai/directives/g/relay.md"] = "# relay\n\n```xml\n<directive name=\"relay\" version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n" +
		"    <model tier=\"fast\" />\n    <limits turns=\"4\" spend=\"0.5\" />\n    <permissions><execute><tool>rye/agent/threads/orchestrator</tool></execute></permissions>\n  </metadata>\n" +
		"  <outputs><output name=\"value\" required=\"true\">value</output></outputs>\n</directive>\n```\n"
	files[".ai/graphs/g/relay.yaml"] = "version: \"1\"\ndescription: a child's message\n" + walkPerms +
		"  - rye.execute.tool.rye.agent.threads.orchestrator\n" + relayGraph
	files["scripts/g.yaml"] += `  "g/relay":
    - tool_calls:
        - tool: rye/agent/threads/orchestrator
          input: {operation: send_graph_message, thread_id: "{{.parent_id}}", name: relayed, data: {value: hi}, message_id: "relay-{{.parent_id}}"}
    - tool_calls:
        - tool: rye/agent/threads/directive_return
          input: {value: "sent: {{field \"success\" .last_tool_result}}"}
`
	return files
}

func messageEnv(t *testing.T) *spooltest.Env {
	return spooltest.New(t, spooltest.Options{Files: walkProject("0ms", map[string]string{"g/inbox": inboxGraph, "g/deadline": deadlineGraph}),
		LeaseTTL: 2 * time.Second})
}

// startInbox starts g/inbox and returns its id.
func startInbox(t *testing.T, e *spooltest.Env) string {
	t.Helper()
	res := e.Spool("graph", "run", "g/inbox", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	return rec.ThreadID
}

// send runs `spool graph send RUN NAME --data DATA [args] --json`.
func send(t *testing.T, e *spooltest.Env, id, name, data string, args ...string) (spooltype.MessageSent, spooltest.Result) {
	t.Helper()
	res := e.Spool(append([]string{"graph", "send", id, name, "--data", data, "--json"}, args...)...)
	var sent spooltype.MessageSent
	if res.Code == 0 {
		res.JSON(t, &sent)
	}
	return sent, res
}

// waitForMessage waits until run id waits at a wait_message node and
// checks that graph show says so, in JSON and in text.
func waitForMessage(t *testing.T, e *spooltest.Env, id, node, name string) {
	t.Helper()
	waitRecord(t, e, id, "waiting for a message", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForMessage && r.CurrentNode == node
	})
	res := e.Spool("graph", "show", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var shown spooltype.GraphRun
	res.JSON(t, &shown)
	require.Equal(t, "message", shown.Record.WaitingFor)
	require.Equal(t, name, shown.MessageName, "graph show --json gives message_name: %s", res.Stdout)
	detail := ""
	for _, row := range shown.Nodes {
		if row.Node == node {
			detail = row.Detail
		}
	}
	require.Contains(t, detail, "for message "+name, "the waiting node's detail names its message: %s", res.Stdout)
	text := e.Spool("graph", "show", id)
	require.Equal(t, 0, text.Code, text.Stderr)
	require.Contains(t, text.Stdout, "waiting    for message "+name+" (spool graph send "+id+" "+name+" --data JSON)")
}

// stepsAt counts the step_completed events of node in run id.
func stepsAt(t *testing.T, e *spooltest.Env, id, node string) int {
	t.Helper()
	n := 0
	for _, c := range payloads[transcript.StepCompleted](t, events(t, e, id), transcript.TypeStepCompleted) {
		if c.Node == node {
			n++
		}
	}
	return n
}

// TestGraphWaitMessage (spec 4.8): validation names a wait_message
// node's bad name and on_timeout; a message sent before the run reaches
// the node waits for it, one sent while it waits wakes it, each visit
// takes one message, oldest first; a repeated --id is kept once; data
// that fails the node's schema and a name the graph does not wait for
// are refused to the sender (exit 2, 422) and never reach the run; a
// message to a run that has ended is refused (exit 1, run_ended, 409); a
// timeout takes on_timeout, or fails wait_timeout without one. A worker
// SIGKILLed as the wait is made durable, as the run suspends, or after
// it took a message but before the step completed, loses no message and
// takes none twice.
func TestGraphWaitMessage(t *testing.T) {
	t.Parallel()
	t.Run("validate", func(t *testing.T) {
		t.Parallel()
		e := spooltest.New(t, spooltest.Options{Files: walkProject("0ms", map[string]string{"g/inbox": inboxGraph, "g/bad": `config:
  start: a
  nodes:
    a: {type: wait_message, next: b}
    b: {type: wait_message, name: "two words", timeout: 1m, on_timeout: nowhere, next: c}
    c: {type: wait_message, name: ok, schema: {type: string}, next: done}
    done: {type: return}
`})})
		res := e.Spool("graph", "validate", "g/bad")
		require.Equal(t, 1, res.Code, res.Stdout+res.Stderr)
		require.Contains(t, res.Stdout, "error: node a: name: missing: a wait_message node takes the messages of one name")
		require.Contains(t, res.Stdout, `error: node b: name: "two words" is not a message name`)
		require.Contains(t, res.Stdout, "error: node b: on_timeout: unknown node `nowhere`")
		require.Contains(t, res.Stdout, "error: node c: schema: type: the inputs schema must be an object, not string")
		res = e.Spool("graph", "validate", "g/inbox")
		require.Equal(t, 0, res.Code, res.Stdout+res.Stderr)
	})
	t.Run("before, during and after", func(t *testing.T) {
		t.Parallel()
		e := messageEnv(t)
		id := startInbox(t, e) // no worker yet: the run has not reached its first node

		sent, res := send(t, e, id, "item", `{"n": 1}`, "--id", "one")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.False(t, sent.Duplicate)
		require.False(t, sent.Woken)
		require.Equal(t, id, sent.RunID)
		again, res := send(t, e, id, "item", `{"n": 100}`, "--id", "one")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.True(t, again.Duplicate, "a repeated id is kept once")
		require.Equal(t, sent.Seq, again.Seq)

		_, res = send(t, e, id, "item", `{"n": "many"}`)
		require.Equal(t, 2, res.Code, "data that fails the schema: %s", res.Stderr)
		require.Contains(t, res.Stderr, "message item fails the schema of node first: data.n: must be an integer")
		require.Contains(t, res.Stderr, "(message_invalid)")
		_, res = send(t, e, id, "itme", `{}`)
		require.Equal(t, 2, res.Code, res.Stderr)
		require.Contains(t, res.Stderr, `graph g/inbox has no wait_message node named "itme" (it waits for: item) (message_unknown)`)
		_, res = send(t, e, id, "item", `{"n": 1`)
		require.Equal(t, 2, res.Code, res.Stderr)
		require.Contains(t, res.Stderr, "--data: not JSON")
		require.Equal(t, 1, strings.Count(strings.TrimSpace(res.Stderr), "\n")+1, "one line: %s", res.Stderr)

		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		waitForMessage(t, e, id, "second", "item") // the first took the message sent before it

		// Through the API as a client would: the second message wakes it.
		srv := startAPI(t, e)
		c, err := client.New(srv.base, client.WithHTTPClient(&http.Client{Transport: newOpenAPITransport(t)}))
		require.NoError(t, err)
		ctx := context.Background()
		woke, err := c.SendGraphMessage(ctx, id, spooltype.GraphMessageRequest{Name: "item", Data: []byte(`{"n": 2}`)})
		require.NoError(t, err)
		require.True(t, woke.Woken, "the run waited for it: %+v", woke)
		_, err = c.SendGraphMessage(ctx, id, spooltype.GraphMessageRequest{Name: "item", Data: []byte(`{"n": "x"}`)})
		var p *spooltype.Problem
		require.ErrorAs(t, err, &p)
		require.Equal(t, http.StatusUnprocessableEntity, p.Status)
		require.Equal(t, "message_invalid", p.Code)

		final := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
		require.Equal(t, map[string]any{"a": float64(1), "b": float64(2), "a_id": "one"}, final.Outputs, "each visit took one message, oldest first")
		require.Equal(t, 1, stepsAt(t, e, id, "first"))
		require.Equal(t, 1, stepsAt(t, e, id, "second"))
		var waits []string
		for _, w := range payloads[transcript.GraphWaiting](t, events(t, e, id), transcript.TypeGraphWaiting) {
			waits = append(waits, w.Node+":"+w.WaitingFor+":"+w.MessageName)
		}
		require.Equal(t, []string{"second:message:item"}, waits, "the first node did not wait: its message had come")

		_, res = send(t, e, id, "item", `{"n": 3}`)
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Contains(t, res.Stderr, "run_ended: graph run "+id+" has ended (completed)")
		_, err = c.SendGraphMessage(ctx, id, spooltype.GraphMessageRequest{Name: "item", Data: []byte(`{"n": 3}`)})
		require.ErrorAs(t, err, &p)
		require.Equal(t, http.StatusConflict, p.Status)
		require.Equal(t, "run_ended", p.Code)
	})
	t.Run("sent while paused", func(t *testing.T) {
		t.Parallel()
		e := messageEnv(t)
		w := e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		id := startInbox(t, e)
		waitForMessage(t, e, id, "first", "item")
		res := e.Spool("graph", "pause", id)
		require.Equal(t, 0, res.Code, res.Stderr)
		_, res = send(t, e, id, "item", `{"n": 1}`)
		require.Equal(t, 0, res.Code, res.Stderr)
		// No worker takes the wake-up the unpause enqueues: the run waits
		// for its message again on its record, but the message has come.
		require.NoError(t, w.Stop(10*time.Second))
		res = e.Spool("graph", "unpause", id)
		require.Equal(t, 0, res.Code, res.Stderr)
		rec, err := e.Orch.Record(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, registry.WaitingForMessage, rec.WaitingFor)
		came, err := e.Orch.MessageArrived(t.Context(), rec)
		require.NoError(t, err)
		require.True(t, came)
		res = e.Spool("graph", "wait", id, "--timeout", "1s")
		require.Equal(t, 1, res.Code, res.Stdout+res.Stderr)
		require.Contains(t, res.Stderr, "not finished after --timeout 1s")
		require.NotContains(t, res.Stderr, "waiting for message", "the message it waited for has come: no hint to send it again")

		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		waitForMessage(t, e, id, "second", "item") // the wake-up took the message sent while paused
		rec, err = e.Orch.Record(t.Context(), id)
		require.NoError(t, err)
		came, err = e.Orch.MessageArrived(t.Context(), rec)
		require.NoError(t, err)
		require.False(t, came, "the first node took it")
		res = e.Spool("graph", "wait", id, "--timeout", "1s")
		require.Equal(t, 1, res.Code, res.Stdout+res.Stderr)
		require.Contains(t, res.Stderr, "waiting for message item at node second", "now the hint is due")
	})
	t.Run("from a thread of the run's tree", func(t *testing.T) {
		t.Parallel()
		e := spooltest.New(t, spooltest.Options{Files: relayFiles(walkProject("0ms", nil))})
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		res := e.Spool("graph", "run", "g/relay", "--json")
		require.Equal(t, 0, res.Code, res.Stderr)
		var started registry.Record
		res.JSON(t, &started)
		rec := e.Wait([]string{started.ThreadID}, time.Minute)[started.ThreadID]
		kids := e.Spool("thread", "list", "--parent", rec.ThreadID, "--json")
		require.Equal(t, thread.StatusCompleted, rec.Status, "children: %s", kids.Stdout)
		require.Equal(t, "hi", rec.Outputs["got"], "the child's message reached the run: %+v", rec.Outputs)
		require.Equal(t, "relay-"+rec.ThreadID, rec.Outputs["id"])
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		e := messageEnv(t)
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		rec, res := runGraph(t, e, "g/deadline", "--input", "route=true")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, map[string]any{"late": true}, rec.Outputs, "on timeout the run took on_timeout")
		require.False(t, rec.UpdatedAt.Before(rec.StartedAt.Add(2*time.Second)), "not before the timeout")
		steps := payloads[transcript.StepCompleted](t, events(t, e, rec.ThreadID), transcript.TypeStepCompleted)
		require.Equal(t, "on_timeout", steps[1].RoutedBy)
		require.JSONEq(t, `{"timed_out": true}`, string(steps[1].Result))

		rec, res = runGraph(t, e, "g/deadline", "--input", "route=false")
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.NotNil(t, rec.Error)
		require.Contains(t, rec.Error.Message, "wait_message strict: no message ping came within 2s")
	})
	t.Run("the example", func(t *testing.T) {
		// examples/.ai/graphs/demo/release.yaml, as README's tour runs it.
		t.Parallel()
		e := spooltest.New(t, spooltest.Options{})
		exampleProject(t, e.Project)
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "4")
		res := e.Spool("graph", "run", "demo/release", "--input", "version=1.4.2", "--json")
		require.Equal(t, 0, res.Code, res.Stderr)
		var started registry.Record
		res.JSON(t, &started)
		waitForMessage(t, e, started.ThreadID, "await_deploy", "deploy_finished")
		sent, res := send(t, e, started.ThreadID, "deploy_finished", `{"ok": true, "url": "https://staging.example"}`, "--id", "deploy-4711")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.True(t, sent.Woken)
		final := e.Wait([]string{started.ThreadID}, 2*time.Minute)[started.ThreadID]
		require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
		require.Equal(t, "1.4.2", final.Outputs["released"])
		require.Equal(t, "https://staging.example", final.Outputs["url"])
		require.GreaterOrEqual(t, final.Outputs["checks_passed"], float64(2))
		replayed := e.Spool("graph", "replay", started.ThreadID)
		require.Equal(t, 0, replayed.Code, replayed.Stdout+replayed.Stderr)
	})
	t.Run("replay", func(t *testing.T) {
		t.Parallel()
		e := messageEnv(t)
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		rec, res := runGraph(t, e, "g/deadline", "--input", "route=true")
		require.Equal(t, 0, res.Code, res.Stderr)
		replayed := e.Spool("graph", "replay", rec.ThreadID)
		require.Equal(t, 0, replayed.Code, replayed.Stdout+replayed.Stderr)
		require.Equal(t, rec.ThreadID+"  replayed 3 of 3 recorded steps against g/deadline: every step took the recorded edge\n", replayed.Stdout)

		// The author edits the gate: the run would have gone the other way.
		file := filepath.Join(e.Project, ".ai/graphs/g/deadline.yaml")
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(b), "op: eq, value: true", "op: eq, value: false", 1)), 0o644))
		replayed = e.Spool("graph", "replay", rec.ThreadID)
		require.Equal(t, 1, replayed.Code, replayed.Stdout+replayed.Stderr)
		require.Equal(t, "spool: "+rec.ThreadID+": step 1 (node pick) goes another way against g/deadline: the graph routes to strict (next), the run went to patient (next)\n", replayed.Stderr)
		pinned := e.Spool("graph", "replay", rec.ThreadID, "--pinned", "--json")
		require.Equal(t, 0, pinned.Code, pinned.Stdout+pinned.Stderr)
		var r struct {
			Steps    int    `json:"steps"`
			Recorded int    `json:"recorded"`
			Against  string `json:"against"`
		}
		pinned.JSON(t, &r)
		require.Equal(t, 3, r.Steps)
		require.Equal(t, "pinned", r.Against)

		// A changed output is a result that differs.
		require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(b), "output: {late: true}", "output: {late: yes, why: timeout}", 1)), 0o644))
		replayed = e.Spool("graph", "replay", rec.ThreadID)
		require.Equal(t, 1, replayed.Code, replayed.Stdout+replayed.Stderr)
		require.Contains(t, replayed.Stderr, `step 3 (node late) goes another way against g/deadline: the graph returns {"late":"yes","why":"timeout"}, the run returned {"late":true}`)
	})
	for _, point := range []string{"graph:message_checkpointed", "graph:message_suspended", "graph:before_complete"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Parallel()
			e := messageEnv(t)
			id := startInbox(t, e)
			if point == "graph:before_complete" {
				// The worker takes the first message, and dies before the
				// step that took it completes: the next takes it again.
				_, res := send(t, e, id, "item", `{"n": 1}`)
				require.Equal(t, 0, res.Code, res.Stderr)
			}
			doomed := e.Start([]string{fastHousekeeping, "SPOOL_FAULT_KILL_AT=" + point}, "worker", "--concurrency", "2")
			require.Eventually(t, doomed.Exited, time.Minute, 20*time.Millisecond, "the worker never reached %s:\n%s", point, doomed.Log())
			if point != "graph:before_complete" {
				_, res := send(t, e, id, "item", `{"n": 1}`)
				require.Equal(t, 0, res.Code, res.Stderr)
			}
			e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
			waitForMessage(t, e, id, "second", "item")
			_, res := send(t, e, id, "item", `{"n": 2}`)
			require.Equal(t, 0, res.Code, res.Stderr)
			final := e.Wait([]string{id}, 2*time.Minute)[id]
			require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
			require.Equal(t, float64(1), final.Outputs["a"], "no message lost")
			require.Equal(t, float64(2), final.Outputs["b"], "none taken twice")
			require.Equal(t, 1, stepsAt(t, e, id, "first"), "the first step completed once")
		})
	}
}

// TestGraphMessagesSurviveRedisLoss (spec 4.8, issue item 6): a message
// is in the blob store before its send returns, so one that Redis loses
// afterwards (the suffix a lossy failover or a restart short of its AOF
// drops: the run's message list, its ids and its message counter) is put
// back by the reconciliation that follows the loss: the run takes both
// messages, a repeated id is still a duplicate, and the next message
// takes the next seq, not one the lost ones had.
func TestGraphMessagesSurviveRedisLoss(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := messageEnv(t)
	id := startInbox(t, e) // no worker: the messages wait for the run
	for i, mid := range []string{"one", "two"} {
		sent, res := send(t, e, id, "item", fmt.Sprintf(`{"n": %d}`, i+1), "--id", mid)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, int64(i+1), sent.Seq)
	}
	stored, err := e.Store.List(ctx, blobkey.GraphMessages(id))
	require.NoError(t, err)
	require.Len(t, stored, 2, "each message is in the store once its send returned")

	rdb := e.Redis.Universal
	require.NoError(t, rdb.Del(ctx, e.Keys.Messages(id)).Err())
	require.NoError(t, rdb.Del(ctx, e.Keys.MessageIDs(id)).Err())
	require.NoError(t, rdb.HDel(ctx, e.Keys.Thread(id), "message_seq").Err())
	require.NoError(t, rdb.Del(ctx, e.Keys.Housekeeping()).Err()) // as a Redis that lost its data: the marker is gone too

	e.Start(nil, "scheduler", "--housekeeping-interval", "1s")
	require.Eventually(t, func() bool {
		n, err := rdb.LLen(ctx, e.Keys.Messages(id)).Result()
		return err == nil && n == 2
	}, time.Minute, 100*time.Millisecond, "reconciliation puts the lost messages back")

	again, res := send(t, e, id, "item", `{"n": 100}`, "--id", "one")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.True(t, again.Duplicate, "a repeated id is still kept once")
	third, res := send(t, e, id, "item", `{"n": 3}`, "--id", "three")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, int64(3), third.Seq, "the counter went past the lost messages' seqs")

	e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
	final := e.Wait([]string{id}, time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, float64(1), final.Outputs["a"])
	require.Equal(t, float64(2), final.Outputs["b"])
	require.Equal(t, "one", final.Outputs["a_id"])
}
