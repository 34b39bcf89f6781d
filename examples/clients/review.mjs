// Runs the demo/review graph through `spool api` with the TypeScript
// client (built: `cd clients/typescript && npm install && npm run build`):
// starts it, prints its events as they are written and the words of the
// model of each of its children as it writes them, approves any tool call
// that waits for a person, and prints the outputs.
//
// In examples/, with `spool dev` running:
//
//     spool api &
//     node clients/review.mjs queues leases budgets
//
// SPOOL_API_URL (default http://127.0.0.1:8081) and SPOOL_API_TOKEN say
// where the API is.
import { Client } from "../../clients/typescript/dist/index.js";

const c = new Client(process.env.SPOOL_API_URL ?? "http://127.0.0.1:8081", { token: process.env.SPOOL_API_TOKEN });
const topics = process.argv.slice(2);
const run = await c.runGraph({ graph: "demo/review", inputs: { topics: topics.length ? topics : ["queues", "leases"] } });
console.log("run", run.thread_id);

// What a child's model writes, piece by piece as it writes it (deltas),
// then each turn's text whole once it is durable.
async function words(child, label) {
  for await (const m of c.events(child, { deltas: true })) {
    if (m.kind === "end") return;
    if (m.kind === "delta") {
      if (!m.data.call_id) console.log(`     ${label} writes: ${JSON.stringify(m.data.text)}`);
    } else if (m.data.event_type === "cognition_out" && m.data.payload?.content) {
      console.log(`     ${label} wrote: ${m.data.payload.content}`);
    }
  }
}

// Follow each child of the run as it starts.
const followers = [];
let watching = true;
const watcher = (async () => {
  const seen = new Set();
  while (watching) {
    for (const k of await c.list({ parent: run.thread_id })) {
      if (!seen.has(k.thread_id)) {
        seen.add(k.thread_id);
        followers.push(words(k.thread_id, k.inputs?.topic ?? k.thread_id));
      }
    }
    await new Promise((r) => setTimeout(r, 200));
  }
})();

for await (const m of c.events(run.thread_id)) {
  if (m.kind === "end") {
    console.log("ended", m.data.status);
    break;
  }
  console.log(String(m.seq).padStart(4), m.data.event_type);
  if (m.data.event_type === "approval_requested") {
    // A person's decision: here, yes to whatever waits.
    for (const p of await c.approvals({ thread: run.thread_id })) console.log(`     approving ${p.tool} (${p.call_id})`);
    await c.approve(run.thread_id, { by: "review.mjs", reason: "approved by the example" });
  }
}
watching = false;
await watcher;
await Promise.all(followers);
const done = await c.wait(run.thread_id);
console.log("status ", done.status);
console.log("outputs", JSON.stringify(done.outputs));
console.log(`spend   $${done.cost.spend.toFixed(6)}`);
process.exit(done.status === "completed" ? 0 : 1);
