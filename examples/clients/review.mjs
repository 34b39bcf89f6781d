// Runs the demo/review graph through `spool api` with the TypeScript
// client (built: `cd clients/typescript && npm install && npm run build`):
// starts it, prints its events as they are written, approves any tool call
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
const done = await c.wait(run.thread_id);
console.log("status ", done.status);
console.log("outputs", JSON.stringify(done.outputs));
console.log(`spend   $${done.cost.spend.toFixed(6)}`);
process.exit(done.status === "completed" ? 0 : 1);
