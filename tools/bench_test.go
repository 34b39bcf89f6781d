//go:build unix

package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// BenchmarkBound cuts a 1 MiB result to the default 32 KiB (in-memory store).
func BenchmarkBound(b *testing.B) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	r := Result{Output: strings.Repeat("0123456789abcdef\n", 1<<16)}
	b.SetBytes(int64(len(r.Output)))
	for b.Loop() {
		if _, err := Bound(ctx, store, "threads/t/artifacts/c.txt", r, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFSAppend is one leased append of a line (in-memory store): the
// lease's overhead over a bare read-modify-write, without network latency.
func BenchmarkFSAppend(b *testing.B) {
	ctx := context.Background()
	env := &Env{ThreadID: "th", TreeID: "tree", Store: blobstore.NewMemory()}
	tool := Builtins(FSConfig{})[0]
	in := json.RawMessage(`{"path":"log.txt","content":"a line of text\n","mode":"append"}`)
	for b.Loop() {
		if err := env.Store.Delete(ctx, blobkey.WorkspaceFile("tree", "log.txt")); err != nil { // keep the file small
			b.Fatal(err)
		}
		if r, err := tool.Run(ctx, env, in); err != nil || r.IsError {
			b.Fatal(err, r.Output)
		}
	}
}

// BenchmarkExternalCall is one external tool call end to end: a /bin/sh
// script reading the call and answering JSON (fork/exec, temp dir, pipes).
func BenchmarkExternalCall(b *testing.B) {
	tools, err := LoadExternal(fstest.MapFS{
		".ai/tools/echo.sh": {Data: []byte("#!/bin/sh\ncat >/dev/null\necho '{\"output\": \"ok\"}'\n"), Mode: 0o755},
	}, ExternalConfig{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	env := &Env{ThreadID: "th"}
	for b.Loop() {
		if r, err := tools[0].Run(context.Background(), env, json.RawMessage(`{}`)); err != nil || r.Output != "ok" {
			b.Fatal(err, r.Output)
		}
	}
}
