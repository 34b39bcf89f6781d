// Package monitor is spool's operator web UI: asynqmon (the asynq queue
// console, mounted as a library under its own root path) beside spool's own
// views of threads, served by one http.Handler.
//
//	/                               threads by status, newest first (?status=, ?directive=, ?limit=)
//	/threads/ID                     record, chain, tree of children and continuations, budget
//	/threads/ID/transcript          the transcript as HTML, growing as it is written
//	/api/threads/ID                 the thread view as JSON
//	/api/threads/ID/events?after=N  transcript events with seq > N (the live page polls it)
//	/asynq/                         asynqmon
//	/metrics                        Prometheus: asynq queue sizes and spool's threads by status
//	/healthz                        liveness, never behind authentication
//
// Thread ids contain slashes (a directive name is their prefix), so the id
// is everything after /threads/ up to an optional /transcript suffix, which
// no id can end with (ids end in -<time>-<random>).
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
