// The TypeScript client against a real `spool api`, Redis and worker. Run
// by the Go test e2e.TestTypeScriptClient, which starts them with the test
// project (t/greet, t/slow, t/gated, the g/review graph) and sets
// SPOOL_API_URL and SPOOL_TEST_MODEL. Without SPOOL_API_URL every test
// fails: these tests never pass by skipping.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, SpoolError } from "../dist/index.js";

const url = process.env.SPOOL_API_URL;
const model = process.env.SPOOL_TEST_MODEL ?? "script:scripts/api.yaml";
const client = () => {
  assert.ok(url, "SPOOL_API_URL names the spool api under test");
  return new Client(url, { token: process.env.SPOOL_API_TOKEN });
};

async function until(what, fn, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test("run and wait", async () => {
  const c = client();
  const rec = await c.run({ directive: "t/greet", inputs: { name: "ts" }, model });
  assert.equal(rec.directive, "t/greet");
  const done = await c.wait(rec.thread_id, { timeoutMs: 60_000 });
  assert.equal(done.status, "completed", JSON.stringify(done.error));
  assert.equal(done.result, "done for ts");
  assert.equal(done.cost.turns, 2);
  const b = await c.budget(rec.thread_id);
  assert.ok(Math.abs(b.actual - done.cost.spend) < 1e-9);
  assert.ok((await c.list({ directive: "t/greet" })).some((r) => r.thread_id === rec.thread_id));
});

test("errors are problems", async () => {
  const c = client();
  await assert.rejects(c.show("t/no-such-thread-1"), (e) => e instanceof SpoolError && e.status === 404 && e.code === "not_found");
  await assert.rejects(c.run({ directive: "t/greet", inputs: { name: "x" }, limits: { turns: -1 } }),
    (e) => e instanceof SpoolError && e.status === 400);
});

test("cancel", async () => {
  const c = client();
  const rec = await c.run({ directive: "t/slow", model });
  await until("t/slow running", async () => (await c.show(rec.thread_id)).status === "running");
  const res = await c.cancel(rec.thread_id);
  assert.ok(res.success);
  assert.equal((await c.wait(rec.thread_id)).status, "cancelled");
});

test("pause and unpause", async () => {
  const c = client();
  // Waiting for a decision: paused at once; unpaused, it waits for it again.
  const gated = await c.run({ directive: "t/gated", model });
  await until("t/gated waiting for approval", async () => {
    const r = await c.show(gated.thread_id);
    return r.status === "waiting" && r.waiting_for === "approval";
  });
  let res = await c.pause(gated.thread_id);
  assert.deepEqual(res, { success: true, thread_id: gated.thread_id, status: "paused", pause_requested: true, runs: 1, paused: 1 });
  assert.equal((await c.show(gated.thread_id)).pause_requested, true);
  res = await c.unpause(gated.thread_id);
  assert.equal(res.status, "waiting");
  assert.equal(res.pause_requested, false);
  assert.equal((await c.show(gated.thread_id)).waiting_for, "approval");
  await c.approve(gated.thread_id, { by: "node" });
  assert.equal((await c.wait(gated.thread_id)).status, "completed");
  await assert.rejects(c.pause(gated.thread_id), (e) => e instanceof SpoolError && e.status === 409 && e.code === "run_ended");

  // Running: paused at its next turn, then it goes on.
  const slow = await c.run({ directive: "t/slow", model });
  await until("t/slow running", async () => (await c.show(slow.thread_id)).status === "running");
  res = await c.pause(slow.thread_id, true);
  assert.equal(res.pause_requested, true);
  await until("t/slow paused", async () => (await c.show(slow.thread_id)).status === "paused");
  await c.unpause(slow.thread_id);
  const done = await c.wait(slow.thread_id);
  assert.equal(done.status, "completed");
  assert.ok(done.paused_ms > 0);

  // The graph routes refuse a thread's id.
  await assert.rejects(c.pauseGraph(slow.thread_id), (e) => e instanceof SpoolError && e.status === 404 && e.code === "not_graph");
  await assert.rejects(c.unpauseGraph(slow.thread_id), (e) => e instanceof SpoolError && e.status === 404 && e.code === "not_graph");
});

test("approve", async () => {
  const c = client();
  const rec = await c.run({ directive: "t/gated", model });
  const pending = await until("an approval", async () => {
    const p = await c.approvals({ thread: rec.thread_id });
    return p.length ? p : null;
  });
  assert.equal(pending[0].tool, "rye/file-system/fs_list");
  const res = await c.approve(rec.thread_id, { reason: "fine", by: "node" });
  assert.equal(res.decision, "approve");
  assert.equal((await c.wait(rec.thread_id)).status, "completed");
});

test("an event stream cut and resumed mid-thread gives every event once", async () => {
  const c = client();
  const rec = await c.run({ directive: "t/slow", model });
  const seen = [];
  for await (const m of c.events(rec.thread_id)) {
    assert.equal(m.kind, "event");
    seen.push(m.seq);
    if (seen.length === 3) break; // the connection is dropped mid-thread
  }
  let end;
  for await (const m of c.events(rec.thread_id, { after: seen.at(-1) })) {
    if (m.kind === "end") { end = m.data; break; }
    seen.push(m.seq);
  }
  assert.equal(end?.status, "completed");
  assert.deepEqual(seen, seen.map((_, i) => i + 1));
  assert.equal(end.last_event_id, seen.at(-1));
});

test("a graph run through its approval", async () => {
  const c = client();
  const run = await c.runGraph({ graph: "g/review", inputs: { topics: ["queues", "leases"], sign_off: true } });
  await until("the sign_off approval", async () => (await c.approvals({ thread: run.thread_id })).length > 0, 90_000);
  await c.approve(run.thread_id, { by: "node" });
  const done = await c.wait(run.thread_id, { timeoutMs: 90_000 });
  assert.equal(done.status, "completed", JSON.stringify(done.error));
  const g = await c.showGraph(run.thread_id);
  assert.equal(g.outputs.reviewed, 2);
});

test("a paused graph run takes the message that came meanwhile once unpaused", async () => {
  const c = client();
  const run = await c.runGraph({ graph: "g/inbox", inputs: {} });
  await until("the run waiting for its first message", async () => (await c.showGraph(run.thread_id)).waiting_for === "message", 90_000);
  const res = await c.pauseGraph(run.thread_id);
  assert.equal(res.status, "paused");
  assert.equal(res.paused, 1);
  await c.sendGraphMessage(run.thread_id, { name: "item", data: { n: 1 } });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await c.showGraph(run.thread_id)).status, "paused");
  await c.unpauseGraph(run.thread_id);
  await until("the run at its second node", async () => {
    const g = await c.showGraph(run.thread_id);
    return g.step === 1 && g.waiting_for === "message";
  }, 90_000);
  await c.sendGraphMessage(run.thread_id, { name: "item", data: { n: 2 } });
  const done = await c.wait(run.thread_id, { timeoutMs: 90_000 });
  assert.equal(done.status, "completed", JSON.stringify(done.error));
  assert.equal(done.outputs.a, 1);
  assert.equal(done.outputs.b, 2);
});

test("a graph run with a message", async () => {
  const c = client();
  const run = await c.runGraph({ graph: "g/inbox", inputs: {} });
  const sent = await c.sendGraphMessage(run.thread_id, { name: "item", data: { n: 1 }, id: "first" });
  assert.equal(sent.run_id, run.thread_id);
  assert.equal(sent.duplicate, false);
  assert.equal((await c.sendGraphMessage(run.thread_id, { name: "item", data: { n: 9 }, id: "first" })).duplicate, true);
  await assert.rejects(c.sendGraphMessage(run.thread_id, { name: "item", data: { n: "one" } }),
    (e) => e instanceof SpoolError && e.status === 422 && e.code === "message_invalid");
  await until("the run waiting at its second node", async () => (await c.showGraph(run.thread_id)).waiting_for === "message", 90_000);
  assert.equal((await c.showGraph(run.thread_id)).message_name, "item");
  assert.equal((await c.sendGraphMessage(run.thread_id, { name: "item", data: { n: 2 } })).woken, true);
  const done = await c.wait(run.thread_id, { timeoutMs: 90_000 });
  assert.equal(done.status, "completed", JSON.stringify(done.error));
  assert.deepEqual(done.outputs, { a: 1, b: 2, a_id: "first" });
  await assert.rejects(c.sendGraphMessage(run.thread_id, { name: "item", data: { n: 3 } }),
    (e) => e instanceof SpoolError && e.status === 409 && e.code === "run_ended");
});
