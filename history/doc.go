// Package history turns a recorded thread tree into a tool: its verified
// turns as a scripted-provider script (`spool thread export-script`), and
// an isolated replay compared with the recording (`spool thread replay`).
// Forking from a turn is orchestrator.Fork.
//
//	Load (verify every transcript of the chain and its children, strictly)
//	  │
//	  ├─▶ Export: one script entry per recorded model turn (text, tool
//	  │     calls and inputs, usage) under each thread's directive; ids as
//	  │     templates ({{.thread_id}}, {{index .children N}}); several
//	  │     threads of a directive told apart by `when` guards
//	  │
//	  └─▶ Replay: embedded Redis + scratch store + own signing key +
//	        in-process worker; the bundle copied with the script; every
//	        thread on that model (orchestrator.Config.Model) and named as
//	        recorded (orchestrator.Config.NewID) ─▶ Load the replay
//	        ─▶ Compare: per thread, per turn: tools, inputs, results
//
// Choices made here:
//   - A replay starts from the first thread of the chain it is given, with
//     that thread's directive, inputs and limits; its children and
//     continuations run as they come. What a person added is not replayed:
//     a resume ends the comparison of a chain, sent messages and approval
//     decisions are not given again (a thread that waits for an approval
//     stops the replay). A fork is not replayed (its conversation opens
//     with another thread's prefix): replay the thread it was forked from.
//   - Threads keep their recorded ids in the replay (a child by its
//     parent and its place among the parent's spawns, a continuation by
//     the thread it continues), so ids in tool inputs and results compare
//     as they are. Results are compared as JSON where they are JSON,
//     without "elapsed_seconds" and without the "cost" of a child's
//     result (another model spends otherwise); the model's text is not
//     compared, its tool calls are.
//   - The first divergence reported is, of the threads that differ, the
//     one whose differing turn was recorded first: the cause rather than a
//     parent whose wait saw its effect.
//   - The script carries the first thread's context window and price, so
//     handoffs and budgets happen as recorded.
package history
