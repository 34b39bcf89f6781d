// Package mcpclient gives threads the tools of MCP servers, with the
// official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A project declares servers in .ai/config/mcp.yaml (config.MCP): stdio
// servers the worker starts (command, env) and streamable HTTP servers it
// reaches (url, headers). Each tool of server S named T is the tool
// mcp/S/T: offered to the model and run like any other tool, so it needs
// the execute capability of that id (rye.execute.tool.mcp.S.T, or a
// wildcard over it) and approvals.yaml may gate it.
//
// # One connection per worker
//
// A worker holds one Pool. A server is connected once per worker and
// shared by every thread that uses it, whichever project declared it:
// servers are keyed by their name and their configuration after ${VAR}
// expansion, so two projects declaring the same server share it and a
// changed mcp.yaml gets a server of its own. A server's tool list is read
// when it connects, and again after it says its list changed. A server
// is connected only for a thread that may call at least one tool under
// mcp/S/ (thread.MatchUnder). A server no thread used for
// Config.IdleTimeout is closed; the rest close with the worker
// (Pool.Close, after its activations have ended): stdin closed, then
// SIGTERM, then SIGKILL to the server's whole process group.
//
// # Failures, and who sees them
//
// The worker's rule holds: a Go error from a tool is an infrastructure
// failure (the activation fails and runs again from its last checkpoint),
// a failure the model should read is a tools.Result with IsError.
//
//   - A server that cannot be started or reached, or whose tools cannot
//     be listed, when an activation loads its tools: the activation fails
//     and is retried (the server may be restarting; a thread is not run
//     with a tool set other than the one it was written for). Retries are
//     bounded by the worker's activation limit.
//   - A configuration no retry can mend ends the thread at once (code
//     tool_error, ErrConfig): a command that is not on the worker's PATH, a
//     ${VAR} the worker's environment lacks or refuses.
//   - A server that exits, or an HTTP server that drops its session,
//     during a call: that call is answered with an error the model reads
//     (the call may have had effects, so it is not silently run again),
//     and the next call starts the server again (connects anew). A stdio
//     server that died between calls is started again by the next call,
//     which then runs normally; so is a call an HTTP server refuses for
//     a session it no longer knows (it restarted: the call did not run).
//   - A server that does not answer within the server's timeout
//     (mcp.yaml, default 60s): an error the model reads; the server is
//     sent notifications/cancelled and kept.
//   - A JSON-RPC error (an unknown tool, bad arguments) and a result with
//     isError: an error the model reads, with the server's message.
//   - The thread's cancel, interrupt or duration limit during a call: the
//     call's context ends, the server is sent notifications/cancelled,
//     and the worker answers the call as it does for any tool.
//   - The blob store failing to keep an image: a Go error (storage is
//     never the model's problem).
//
// # Results
//
// Text content is the tool's output, one block per line. Structured
// content is added as JSON unless a text block already holds the same
// JSON (the spec asks servers to send both). Images, audio and embedded
// binary resources are stored in the blob store, content-addressed under
// the calling thread (threads/<id>/artifacts/mcp-<sha256>.<ext>), and the
// output names each with its type and size. Resource links are named by
// URI. The worker then bounds the output as it does every tool's.
//
// # What a server's process holds
//
// A stdio server is the project's code, held as an external tool is
// (package tools): its environment is the worker's PATH, HOME, locale and
// the like (Config.PassEnv) and the server's env from mcp.yaml, never a
// variable tools.IsCredential names. ${VAR} references in url, headers
// and env are expanded from the worker's environment, except the
// worker's own settings and keys (SPOOL_*, AWS_*, ANTHROPIC_*,
// OPENAI_*), which a project cannot pull into a server: an operator sets
// what MCP servers need (REMOTE_TOKEN) beside them. A server runs in the
// worker's working directory; a worker killed with SIGKILL leaves its
// stdio servers their stdin closed, on which MCP servers exit.
package mcpclient
