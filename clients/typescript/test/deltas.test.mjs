// The event stream's deltas (events(id, { deltas: true })): against a
// stream served here, as the API serves one, and against the real `spool
// api` of client.test.mjs (e2e.TestTypeScriptClient), whose t/talk writes
// a text and a tool call, then a text, each streamed in pieces
// (scripts/talk.yaml).
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Client } from "../dist/index.js";

const talk = "script:scripts/talk.yaml";

// serve answers thread t/d-1-a's events with deltas: the first connection
// drops mid-delta after event 1 and two pieces of turn 1; the next starts
// again with the snapshot of turn 1 so far (offset 0), as a reconnection
// does. Each request's query and Last-Event-ID go to requests.
async function serve(t) {
  const requests = [];
  const srv = http.createServer((req, res) => {
    const resume = req.headers["last-event-id"] ?? "";
    requests.push([new URL(req.url, "http://x").search, resume]);
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    const out = ["retry: 5\n\n"];
    const event = (seq) => out.push(`id: ${seq}\ndata: ${JSON.stringify({ timestamp: "2026-01-01T00:00:00Z", thread_id: "t/d-1-a", seq, event_type: "cognition_out", payload: {} })}\n\n`);
    const delta = (d) => out.push(`event: delta\ndata: ${JSON.stringify(d)}\n\n`);
    if (resume === "" || resume === "0") {
      event(1);
      delta({ turn: 1, offset: 0, text: "Hé" });
      delta({ turn: 1, offset: 3, text: "llo" });
      out.push('event: delta\ndata: {"turn":1,"off'); // the connection drops
    } else {
      delta({ turn: 1, offset: 0, text: "Héllo" }); // the snapshot: had already
      delta({ turn: 1, offset: 6, text: ", wörld" });
      delta({ turn: 1, call_id: "c1", tool: "t/x", offset: 0, text: '{"a":' });
      event(2);
      delta({ turn: 2, offset: 0, text: "Bye" });
      delta({ turn: 2, attempt: 1, offset: 0, text: "Bye!" }); // the model call retried
      delta({ turn: 2, offset: 3, text: "?" }); // of the attempt before: stale
      out.push('event: future\ndata: {"x":1}\n\n'); // a message this client does not know
      out.push('event: end\ndata: {"thread_id":"t/d-1-a","status":"completed","last_event_id":2}\n\n');
    }
    res.end(out.join(""));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => srv.close(r)));
  return { url: `http://127.0.0.1:${srv.address().port}`, requests };
}

async function log(items) {
  const out = [];
  for await (const m of items) {
    if (m.kind === "delta") {
      const d = m.data;
      assert.equal(m.seq, undefined);
      out.push(`${d.call_id ? `call ${d.call_id} ${d.tool}` : "delta"} ${d.turn}/${d.attempt ?? 0} ${d.offset} ${d.text}`);
    } else if (m.kind === "event") out.push(`event ${m.seq}`);
    else out.push(`end ${m.data.status}`);
  }
  return out;
}

test("deltas: each byte once across a reconnection", async (t) => {
  const s = await serve(t);
  const got = await log(new Client(s.url).events("t/d-1-a", { deltas: true, backoffMs: 10 }));
  assert.deepEqual(got, ["event 1", "delta 1/0 0 Hé", "delta 1/0 3 llo", "delta 1/0 6 , wörld", 'call c1 t/x 1/0 0 {"a":',
    "event 2", "delta 2/0 0 Bye", "delta 2/1 0 Bye!", "end completed"]);
  assert.deepEqual(s.requests, [["?deltas=true", "0"], ["?deltas=true", "1"]]);
});

test("no deltas unless asked", async (t) => {
  const s = await serve(t);
  assert.deepEqual(await log(new Client(s.url).events("t/d-1-a", { backoffMs: 10 })), ["event 1", "event 2", "end completed"]);
  assert.deepEqual(s.requests, [["", "0"], ["", "1"]]);
});

test("an event stream with deltas gives each turn's text once, as committed", async () => {
  const url = process.env.SPOOL_API_URL;
  assert.ok(url, "SPOOL_API_URL names the spool api under test");
  const c = new Client(url, { token: process.env.SPOOL_API_TOKEN });
  const rec = await c.run({ directive: "t/talk", model: talk });
  const bytes = (s) => new TextEncoder().encode(s).length;
  const text = new Map(), args = new Map(), committed = new Map(), calls = new Map(), seqs = [];
  let end;
  for await (const m of c.events(rec.thread_id, { deltas: true })) {
    if (m.kind === "end") { end = m.data; break; }
    if (m.kind === "delta") {
      const d = m.data;
      const [have, key] = d.call_id ? [args, d.call_id] : [text, d.turn];
      if (d.call_id) assert.equal(d.tool, "rye/file-system/fs_write");
      assert.equal(d.offset, bytes(have.get(key) ?? ""), "each byte once, in order");
      have.set(key, (have.get(key) ?? "") + d.text);
      continue;
    }
    assert.notEqual(m.data.event_type, "token_delta", "with deltas on, the text comes as deltas");
    seqs.push(m.seq);
    if (m.data.event_type === "cognition_out") {
      committed.set(m.data.payload.turn, m.data.payload.content);
      for (const call of m.data.payload.tool_calls ?? []) calls.set(call.id, call.input);
    }
  }
  assert.equal(end?.status, "completed");
  assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b), "each durable event once, in seq order");
  assert.ok(committed.get(2)?.startsWith("second: "));
  assert.ok(text.has(2), "the turns' text came as deltas");
  for (const [turn, t] of text) assert.equal(t, committed.get(turn), `turn ${turn}: the deltas are its committed text`);
  for (const [id, a] of args) assert.deepEqual(JSON.parse(a), calls.get(id), "a call's deltas are its committed arguments");
});
