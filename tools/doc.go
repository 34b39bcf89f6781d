// Package tools holds the tools a thread's model can call, other than the
// orchestration tools that need worker internals (thread_directive,
// orchestrator, directive_return: the worker registers those itself), and the
// guard that bounds large tool results.
//
// A tool is an item id ("rye/file-system/fs_write") with a JSON Schema for
// its input and a Run method. The worker builds one Registry per activation
// from Builtins, LoadExternal(bundle) and its own orchestration tools, offers
// Registry.Defs (filtered by the thread's capabilities) to the model, checks
// each call's capability, and dispatches it with Registry.Call, which runs the
// tool and bounds its result.
//
// Errors: Run returns a non-nil error only for an infrastructure failure (the
// blob store is down, the context was cancelled); the worker should treat it
// like any other failed activation step. Everything that is the model's or the
// tool's fault (a path escaping the workspace, a missing file, a tool exiting
// non-zero, a timeout) is a Result with IsError set, which goes back to the
// model as an error tool message.
//
// # Workspace
//
// File tools work in a per-tree workspace kept in the blob store, so that
// every thread of a tree, on any worker, sees the same files:
//
//	workspaces/<tree id>/files/<path>    file contents
//	workspaces/<tree id>/locks/<path>    short write leases (see below)
//	threads/<thread id>/artifacts/<call id>.txt   full results cut by Bound
//
// (package blobkey builds these keys).
//
// Paths are relative, slash-separated and cleaned; an absolute path, one
// that climbs out with "..", or one holding a backslash, NUL or other control
// character is refused (see CleanPath).
//
// Writes are serialised per file by a lease object created with
// Store.PutIfAbsent (an atomic create on every backend). Each write (overwrite,
// append, create) takes the lease, does its read-modify-write, and deletes the
// lease. So concurrent appends from sibling threads on different workers do
// not lose data, provided a write finishes within the lease (FSConfig.LockLease,
// 30 s by default; a write that notices it ran past its lease gives up and
// retries). A lease left by a crashed worker is broken once it has expired by
// the breaker's clock, so clocks are assumed to agree within a fraction of the
// lease. The remaining gap: two writers that break the same expired lease at
// the same instant can both believe they hold it. A conditional put (Put
// with If-Match on the ETag that was read) would close it, and would let
// append drop the lease for plain optimistic retry; blobstore.Store has no
// such call today.
//
// # External tools
//
// A project ships its own tools under .ai/tools/ in the directive bundle.
// Two forms are accepted:
//
//	.ai/tools/acme/scrape.yaml   manifest (id, description, input_schema,
//	.ai/tools/acme/scrape.py     executable, args, timeout, env)
//
//	.ai/tools/acme/hello.sh      bare executable: id "acme/hello", schema
//	                             {"type":"object"}, default timeout
//
// A bare file counts as a tool when it is executable (any x bit in the bundle)
// or starts with "#!", and no manifest names it. The call is written to the
// process's stdin as {"tool","input","thread_id","parent_thread_id","tree_id"}
// and the result read from stdout: {"output": "...", "is_error": false}, or any
// other JSON, whose text becomes the output. See ExternalConfig for the
// environment, working directory, timeout and capture limits.
//
// # What a tool's process holds
//
// A project tool is the project's code; the worker's credentials are not
// its to have. Its environment is PATH, HOME, the locale and the like
// (ExternalConfig.PassEnv), its manifest's env, and the call's own:
// RYE_PARENT_THREAD_ID, SPOOL_THREAD_ID, SPOOL_TREE_ID, TMPDIR (its private
// working directory). No variable that holds or locates a credential is
// ever copied from the worker: the Redis URL (it may hold the password),
// the S3/AWS credentials, the signing key's path, provider keys, and any
// name with PASSWORD, SECRET, TOKEN, API_KEY, PRIVATE, CREDENTIAL or AUTH
// in it, whatever PassEnv and PassEnvPrefixes say.
//
// Yet a tool may start child threads: `spool thread run DIRECTIVE` in its
// process starts a child of the calling thread, with --wait and --json as
// usual. For that the worker serves each call a unix socket in the call's
// working directory and gives the process SPOOL_SPAWN_SOCKET and
// SPOOL_SPAWN_TOKEN (a random token for this call alone); the CLI finds
// them and asks the worker, which starts the child with its own
// connections, as a child of the calling thread only (Env.Children,
// package spawn). The grant dies with the call. A tool that needs a
// credential of its own (an API of its own) gets it from its manifest's
// env, a deliberate choice per tool. A tool still runs as the worker's
// user: run workers under a user of their own, and keep their secrets in
// files that user alone reads only if tools are trusted with that user.
//
// # Guard
//
// Bound keeps a model's context small: a result above the limit (32 KiB by
// default) is stored whole as an artifact and the model gets its head and tail
// with a line naming the artifact and the sizes. fs_read can page through an
// artifact of the calling thread with its artifact parameter.
package tools
