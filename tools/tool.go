package tools

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/spawn"
	"github.com/spool-run/spool/thread"
)

// Env is what a tool call knows about the thread that makes it.
type Env struct {
	// ThreadID is the calling thread. External tools get it as
	// RYE_PARENT_THREAD_ID, so threads they start are its children.
	ThreadID string
	// ParentID is the calling thread's parent ("" for a root thread).
	ParentID string
	// TreeID is the root thread of the tree. The workspace is per tree:
	// every thread of the tree shares it. Required by the file tools.
	TreeID string
	// Store holds the workspace and the artifacts. Required by the file
	// tools and by Registry.Call when a result must be bounded.
	Store blobstore.Store
	// Env is extra environment for external tools. RYE_PARENT_THREAD_ID
	// is always set to ThreadID, whatever this says.
	Env map[string]string
	// Children, when set, starts and waits on child threads of ThreadID
	// for an external tool's process: the call serves it on a socket that
	// `spool thread run` inside the tool finds (package spawn), so the
	// process needs none of the worker's credentials.
	Children spawn.Handler
	// Logger receives debug lines about tool runs; nil discards them.
	Logger *slog.Logger
}

func (e *Env) logger() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// Result is what goes back to the model for one tool call.
type Result struct {
	// Output is the text the model sees.
	Output string
	// IsError marks a failed call (bad input, missing file, tool failure).
	IsError bool
	// Artifact is the blob key of the full output when Bound cut it.
	Artifact string
}

// Tool is one callable item.
type Tool interface {
	// Def describes the tool to the model; Def().Name is the item id.
	Def() thread.ToolDef
	// Run executes one call. The error is for infrastructure failures
	// only; a failure the model should see is a Result with IsError.
	Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error)
}

// errorResult builds a tool-level failure.
func errorResult(msg string) Result { return Result{Output: msg, IsError: true} }
