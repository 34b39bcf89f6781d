package blobkey_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
)

// TestLayout pins every key byte for byte: stored data and the CLI read
// them back by these names.
func TestLayout(t *testing.T) {
	t.Parallel()
	const id, tree = "demo/hello-1739820456-k3j9qa", "demo/hello-1739820456-k3j9qa"
	digest := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ got, want string }{
		{blobkey.Bundle(digest), "bundles/" + digest + ".json"},
		{blobkey.BundleBlob(digest), "bundles/blobs/" + digest},
		{blobkey.Thread(id), "threads/demo/hello-1739820456-k3j9qa/"},
		{blobkey.Segments(id), "threads/demo/hello-1739820456-k3j9qa/transcript/"},
		{blobkey.Segment(id, 1), "threads/demo/hello-1739820456-k3j9qa/transcript/00000001.jsonl"},
		{blobkey.Segment(id, 123456789), "threads/demo/hello-1739820456-k3j9qa/transcript/123456789.jsonl"},
		{blobkey.ThreadJSON(id), "threads/demo/hello-1739820456-k3j9qa/thread.json"},
		{blobkey.Capabilities(id), "threads/demo/hello-1739820456-k3j9qa/capabilities.md"},
		{blobkey.Result(id), "threads/demo/hello-1739820456-k3j9qa/result.txt"},
		{blobkey.Outputs(id), "threads/demo/hello-1739820456-k3j9qa/outputs.json"},
		{blobkey.Artifacts(id), "threads/demo/hello-1739820456-k3j9qa/artifacts/"},
		{blobkey.ToolResult(id, "toolu_01ABC"), "threads/demo/hello-1739820456-k3j9qa/artifacts/toolu_01ABC.txt"},
		{blobkey.ToolResult(id, "toolu_01/ab:c"), "threads/demo/hello-1739820456-k3j9qa/artifacts/toolu_01_ab_c.txt"},
		{blobkey.ToolInput(id, "call_9.x"), "threads/demo/hello-1739820456-k3j9qa/artifacts/call_9.x-input.json"},
		{blobkey.Response(id, 7), "threads/demo/hello-1739820456-k3j9qa/artifacts/turn-7-response.txt"},
		{blobkey.MCPContent(id, "00ff", ".png"), "threads/demo/hello-1739820456-k3j9qa/artifacts/mcp-00ff.png"},
		{blobkey.Workspace(tree), "workspaces/demo_hello-1739820456-k3j9qa/"},
		{blobkey.WorkspaceFiles(tree), "workspaces/demo_hello-1739820456-k3j9qa/files/"},
		{blobkey.WorkspaceFile(tree, "dir/notes.txt"), "workspaces/demo_hello-1739820456-k3j9qa/files/dir/notes.txt"},
		{blobkey.WorkspaceLock(tree, "dir/notes.txt"), "workspaces/demo_hello-1739820456-k3j9qa/locks/dir/notes.txt"},
		{blobkey.Knowledge("demo/hello", id), "knowledge/agent/threads/demo/hello/demo/hello-1739820456-k3j9qa.md"},
	} {
		require.Equal(t, c.want, c.got)
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"toolu_01-A.b": "toolu_01-A.b",
		"a/b:c d":      "a_b_c_d",
		"é":            "__", // per byte
		"":             "_",
		".":            "_",
		"..":           "_",
		"...":          "...",
	} {
		require.Equal(t, want, blobkey.Name(in), "Name(%q)", in)
	}
}

func TestParseSegment(t *testing.T) {
	t.Parallel()
	const id = "demo/hello-1"
	for _, n := range []int64{1, 2, 99999999, 100000000} {
		got, ok := blobkey.ParseSegment(id, blobkey.Segment(id, n))
		require.True(t, ok, "segment %d", n)
		require.Equal(t, n, got)
	}
	for _, key := range []string{
		"threads/demo/hello-1/transcript/00000000.jsonl",  // segments count from 1
		"threads/demo/hello-1/transcript/0000001.jsonl",   // too short
		"threads/demo/hello-1/transcript/000000001.jsonl", // padded past the width
		"threads/demo/hello-1/transcript/0000000a.jsonl",
		"threads/demo/hello-1/transcript/00000001.json",
		"threads/demo/hello-2/transcript/00000001.jsonl", // another thread's
		"threads/demo/hello-1/thread.json",
		"bundles/00000001.jsonl",
	} {
		_, ok := blobkey.ParseSegment(id, key)
		require.False(t, ok, key)
	}
}

func FuzzParseSegment(f *testing.F) {
	f.Add("demo/hello-1", int64(1))
	f.Add("a", int64(12345678901))
	f.Fuzz(func(t *testing.T, id string, n int64) {
		got, ok := blobkey.ParseSegment(id, blobkey.Segment(id, n))
		if n >= 1 {
			require.True(t, ok)
			require.Equal(t, n, got)
		} else {
			require.False(t, ok)
		}
	})
}
