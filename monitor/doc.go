// Package monitor is spool's operator web UI: asynqmon (the asynq queue
// console, mounted as a library under its own root path) beside spool's own
// views of threads, served by one http.Handler.
//
//	/                               threads by status, newest first (?status=, ?directive=, ?tenant=, ?limit=),
//	                                each with its error's code and message; spool's asynq queues
//	                                beside the threads in error (asynq's Failed counts failed
//	                                activation tasks, not threads in error: the page says why)
//	/threads/ID                     record, chain, tree of children and continuations, budget,
//	                                its calls waiting for approval, actions, a link to its task
//	                                in asynqmon
//	/threads/RUN                    a graph run's page (graph.go): a diagram of its pinned
//	                                definition in a layered layout (graph_layout.go: the node
//	                                in flight, the nodes visited, the edges taken and how often,
//	                                loops drawn around, an edge that skips a layer in a lane of
//	                                its own, no edge through a node), the node
//	                                table, each foreach's progress with its children, the
//	                                steps, the state after any step (?step=N), approve and
//	                                deny for an approval node, cancel, pause and unpause, resume
//	                                and fork
//	/threads/ID/transcript          the transcript as HTML, growing as it is written
//	/threads/ID/timeline            a waterfall of its turns, model calls, tool calls and waits,
//	                                with durations and costs, and the spend of its tree over time
//	/approvals                      the tool calls and graph runs' approval nodes waiting for a
//	                                person (a node's prompt and show as text, key by key), with
//	                                approve and deny
//	/ratelimits                     the fleet's rate limits (see below)
//	/tenants                        every tenant `spool tenant list` knows: weight, share, running,
//	                                ready, blocked by reason, root chains in flight, spend today and
//	                                this month against its ceilings (orchestrator.TenantStatuses)
//	/tenants/T                      a tenant as `spool tenant show` reads it (settings and their
//	                                sources, spend windows with what is held, its concurrency keys),
//	                                its admission counters, and the runs admission holds, by what
//	                                they wait for and their place in line, linking to their pages;
//	                                a run's page links to its tenant and says where it waits
//	/cost                           spend per day by a key (directive, model, tenant, tag:KEY)
//	/webhooks                       every endpoint sent a delivery, with its counters, and the newest
//	                                deliveries (endpoint=, status=) with attempts and last answer
//	POST /webhooks/ID/redeliver     send a delivery again, the same webhook-id and body (after a
//	                                confirmation)
//	POST /approvals/decide          approve or deny (thread, call, decision, reason, by)
//	POST /threads/ID/send           a message the model sees before its next call
//	POST /threads/ID/interrupt      the same, stopping the model call or tool in flight
//	POST /threads/ID/cancel         cancel (after a confirmation page; cascade=1: children too)
//	POST /threads/ID/pause          pause the run and its unfinished descendants (after a confirmation;
//	                                tree=1: the whole tree, from its root), a thread's or a graph run's
//	POST /threads/ID/unpause        let a paused run and its descendants go on (after a confirmation;
//	                                tree=1 as for pause)
//	POST /threads/ID/resume         resume a finished thread with a message (after a confirmation);
//	                                a graph run from its last checkpoint (from=NODE optional)
//	POST /threads/RUN/fork          a graph run from its checkpoint after step=N (after a confirmation)
//	/v1/approvals/decide?token=T    the approval webhook's one-time links: GET shows the call,
//	                                POST decides (orchestrator.DecideByToken)
//	/api/threads/ID                 the thread view as JSON
//	/api/threads/ID/events?after=N  transcript events with seq > N (the live page polls it)
//	/api/threads/ID/timeline        the timeline as JSON
//	/api/ratelimits                 the rate limits page as JSON
//	/api/tenants, /api/tenants/T    the tenants pages as JSON
//	/asynq/                         asynqmon, with a bar back to the thread views
//	/metrics                        Prometheus: asynq queue sizes, spool's threads by status, the
//	                                fleet's rate-limit counters (spool_ratelimit_fleet_*) and
//	                                admission's state (spool_admission_*, spool_tenant_spend_*,
//	                                spool_idempotent_replays_total; admission.go) and the webhook
//	                                deliveries (spool_webhook_*; webhook_metrics.go)
//	/healthz                        liveness, never behind authentication
//
// Rate limits: the page reads the rules of Config.Project's
// rate_limits.yaml on every request (as the workers read them from a
// thread's bundle) and, for each budget of each rule (one per API key for
// a per_key rule), shows its limits, what the current minute holds as
// the limiter sees it (requests, input and output tokens, concurrency
// leases, waiters, a provider 429's block), the fleet's counters that
// the limiter's scripts keep in Redis (ratelimit.Status: calls admitted,
// admissions refused by what refused them, threads handed back to wait,
// tokens reserved against tokens used, and their ratio: below 100%,
// over-estimates that settlement gave back), and the threads waiting for
// a rate limit now (status waiting, waiting_for rate_limit, from the
// registry's active threads) with the rules whose glob matches their
// model and when they come back. A project without the file says so,
// with its path. /metrics exports the same counters per budget
// (spool_ratelimit_fleet_admitted_total, _throttled_total{kind},
// _waiting_total, _tokens_total{kind,stage}, _in_flight), labelled by
// rule (the budget id the workers' spool_ratelimit_* metrics use) and
// match: the fleet's totals, where each worker's own are its share.
//
// Thread ids contain slashes (a directive name is their prefix), so the id
// is everything after /threads/ up to an optional /transcript, /timeline
// or action suffix, which no id can end with (ids end in -<time>-<random>).
//
// Actions: every POST is a form of the monitor's own pages; one from
// another origin is refused by http.CrossOriginProtection (Sec-Fetch-Site,
// else Origin against Host), as the API refuses it: the forms carry no
// token. Each action answers with a 303 to the page that shows its
// outcome once (a flash cookie signed under Config.SessionKey).
// Cancel and resume show a confirmation page first, and need the signing
// key (they sign thread.json and the transcript's thread_resumed): a
// monitor without one (`spool monitor`, which holds only public keys)
// does not offer them. Pause and unpause (an unfinished run that is not
// paused offers Pause, a paused one, or one whose pause is requested,
// Unpause) show a confirmation page too, and sign nothing: every monitor
// that is not read-only offers them. A decision or message is recorded as by the basic
// auth user, else the form's name, else "monitor". The one-time decision
// links are outside the authentication (their signed token is the
// credential), and a GET of one decides nothing, so that a link preview
// does not decide.
//
// asynqmon: its index page loads /static/asynqmon.js, a bar back to the
// thread views that, on a task's page, links to the thread the task
// activates (a task id is its thread's id, or "<id>@<reason>-<seq>"); the
// script also escapes task ids with slashes in asynqmon's routes, and the
// monitor answers asynqmon's lookup of such a task (its router cannot).
//
// Pages are server-rendered html/template with one embedded stylesheet and
// one embedded script; nothing is fetched from the internet (the links to
// Google Fonts in asynqmon's index page are removed on the way out). Live
// parts poll: the thread page re-fetches itself and swaps its live section
// while anything in the tree still runs, the transcript page asks the events
// endpoint for what came after the last seq it shows. Transcripts are read
// through a transcript.Follower per thread, cached, so a poll fetches only
// the segments committed since the previous one; every segment is verified
// against the keyring, and a transcript that fails verification shows its
// intact prefix with the reason.
//
// Security: the handler has no opinion on where it listens; `spool monitor`
// binds to loopback by default and refuses a non-loopback address without
// basic auth or a token. Auth guards every path but /healthz. A token is
// accepted as "Authorization: Bearer" or as ?token=, which also sets an
// HttpOnly SameSite=Strict cookie for the browser's next requests. Unsafe
// cross-origin requests (asynqmon's buttons) are refused
// (http.CrossOriginProtection), Config.Hosts restricts the Host header
// against DNS rebinding, and spool's pages carry a Content-Security-Policy
// that allows only their own script and stylesheet.
package monitor
