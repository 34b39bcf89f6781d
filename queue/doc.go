// Package queue is the asynq side of a thread: the task that carries one
// activation, its id, and the enqueuer that puts it on a spool queue.
//
//	orchestrator ──Enqueue(Activation, seq, queue)──▶ asynq task TypeActivate
//	                                                  id = TaskID: "<thread>" for
//	                                                  the start, else
//	                                                  "<thread>@<reason>-<seq>"
//	                                                          │
//	housekeeping ──Reenqueue (a finished task holds the id)──▶│
//	                                                          ▼
//	                                     worker ──ParseActivation──▶ registry Claim
//
// A task id names the activation it is for (the registry version or
// suspension that made it), so however many processes enqueue one
// wake-up, asynq holds one task. Queue names are a spool namespace's
// (keyspace.Space.Queue). What a thread is, and who runs it, is package
// registry's.
package queue
