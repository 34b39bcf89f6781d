// Package blobkey builds the key of every object spool keeps in the blob
// store, in one place, as package keyspace does for Redis keys. The names
// are a contract: stored transcripts and bundles, and what `spool`
// commands print and read back (an artifact named in a tool result, a cut
// result's note), depend on them byte for byte.
//
// The layout (keys are relative to the store's bucket prefix,
// blobstore.S3Config.Prefix):
//
//	bundles/
//	├── <digest>.json                  Bundle: a directive bundle's manifest; digest is its sha256
//	└── blobs/<sha256>                 BundleBlob: one object per distinct file of any bundle
//	threads/<thread id>/               Thread (a thread id holds a slash: "demo/hello-1739820456-k3j9qa")
//	├── transcript/                    Segments
//	│   ├── 00000001.jsonl             Segment 1: events ... checkpoint (ParseSegment reads n back)
//	│   └── 00000002.jsonl             Segment 2
//	├── thread.json                    ThreadJSON
//	├── capabilities.md                Capabilities
//	├── result.txt                     Result: a result too large for the registry record, whole
//	├── outputs.json                   Outputs: outputs too large for the registry record, whole
//	├── messages/00000001.json         GraphMessage: a graph run's message n (GraphMessages is the prefix)
//	└── artifacts/                     Artifacts
//	    ├── <call id>.txt              ToolResult: a tool's full result, cut in the transcript
//	    ├── <call id>-input.json       ToolInput: a tool call's input over the worker's bound, not run
//	    ├── turn-<n>-response.txt      Response: a model answer over the worker's bound, whole
//	    └── mcp-<hash><.ext>           MCPContent: binary content of an MCP tool's result
//	workspaces/<tree id>/              Workspace: the files the threads of one tree share
//	├── files/<path>                   WorkspaceFile (WorkspaceFiles is the prefix)
//	└── locks/<path>                   WorkspaceLock: a short write lease on one file
//	knowledge/agent/threads/<directive>/<thread id>.md
//	                                   Knowledge: a thread's knowledge render
//
// A call id or a tree id is made safe for a key by Name; thread ids,
// directive names, digests and workspace paths are taken as they are
// (their owners validate them). Prefixes end in '/'.
package blobkey

import (
	"fmt"
	"strconv"
	"strings"
)

// Names of the files of a thread, under Thread.
const (
	ThreadJSONName   = "thread.json"
	CapabilitiesName = "capabilities.md"
)

// segmentDigits is the width of a segment's zero-padded number, so that
// lexical order is numeric order.
const segmentDigits = 8

// Bundle is the key of the manifest of the bundle with this digest.
func Bundle(digest string) string { return "bundles/" + digest + ".json" }

// BundleBlob is the key of a bundle file's content, by its sha256 (hex).
func BundleBlob(sha256 string) string { return "bundles/blobs/" + sha256 }

// Thread is the prefix of everything spool stores for a thread.
func Thread(threadID string) string { return "threads/" + threadID + "/" }

// Segments is the prefix of a thread's transcript segments.
func Segments(threadID string) string { return Thread(threadID) + "transcript/" }

// Segment is the key of segment n (from 1) of a thread's transcript.
func Segment(threadID string, n int64) string {
	return fmt.Sprintf("%s%0*d.jsonl", Segments(threadID), segmentDigits, n)
}

// ParseSegment returns n for the key Segment(threadID, n), and false for
// any other key (another thread's, a number not written as Segment
// writes it).
func ParseSegment(threadID, key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, "threads/")
	if ok {
		rest, ok = strings.CutPrefix(rest, threadID)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, "/transcript/")
	}
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, ".jsonl")
	if !ok || len(num) < segmentDigits {
		return 0, false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || fmt.Sprintf("%0*d", segmentDigits, n) != num {
		return 0, false
	}
	return n, true
}

// ThreadJSON is the key of a thread's thread.json.
func ThreadJSON(threadID string) string { return Thread(threadID) + ThreadJSONName }

// Capabilities is the key of a thread's capabilities.md.
func Capabilities(threadID string) string { return Thread(threadID) + CapabilitiesName }

// Result is the key of a thread's whole result when it is too large for
// its registry record.
func Result(threadID string) string { return Thread(threadID) + "result.txt" }

// Outputs is the key of a thread's outputs (JSON) when they are too large
// for its registry record.
func Outputs(threadID string) string { return Thread(threadID) + "outputs.json" }

// GraphState is a graph run's state snapshot, content addressed by the
// hex SHA-256 of its bytes (written once; identical states share it).
func GraphState(runID, sha256 string) string { return Thread(runID) + "state/" + sha256 + ".json" }

// GraphMessages is the prefix of the messages sent to a graph run.
func GraphMessages(runID string) string { return Thread(runID) + "messages/" }

// GraphMessage is the key of message seq (from 1) of a graph run, its
// number zero-padded so that the keys list in order.
func GraphMessage(runID string, seq int64) string {
	return fmt.Sprintf("%s%08d.json", GraphMessages(runID), seq)
}

// Artifacts is the prefix of a thread's artifacts.
func Artifacts(threadID string) string { return Thread(threadID) + "artifacts/" }

// ToolResult is the key of the full result of a tool call.
func ToolResult(threadID, callID string) string { return Artifacts(threadID) + Name(callID) + ".txt" }

// ToolInput is the key of the input of a tool call that was too large to run.
func ToolInput(threadID, callID string) string {
	return Artifacts(threadID) + Name(callID) + "-input.json"
}

// Response is the key of the whole model answer of a turn that was too
// large to record.
func Response(threadID string, turn int) string {
	return Artifacts(threadID) + "turn-" + strconv.Itoa(turn) + "-response.txt"
}

// MCPContent is the key of binary content an MCP tool returned, named by
// hash (hex) so a retried call writes the same key; ext is a file
// extension with its dot (".png").
func MCPContent(threadID, hash, ext string) string {
	return Artifacts(threadID) + "mcp-" + hash + ext
}

// Workspace is the prefix of everything of a tree's workspace.
func Workspace(treeID string) string { return "workspaces/" + Name(treeID) + "/" }

// WorkspaceFiles is the prefix of a tree's workspace files.
func WorkspaceFiles(treeID string) string { return Workspace(treeID) + "files/" }

// WorkspaceFile is the key of a file of a tree's workspace, by its cleaned
// path (tools.CleanPath).
func WorkspaceFile(treeID, cleanPath string) string { return WorkspaceFiles(treeID) + cleanPath }

// WorkspaceJournals is the prefix of a tree's write-back journals: a
// command's write-back of several files, recorded before any is stored
// and rolled forward by whoever finds it (tools' settleWorkspace).
func WorkspaceJournals(treeID string) string { return Workspace(treeID) + "journal/" }

// WorkspaceJournal is the key of write-back journal id of a tree.
func WorkspaceJournal(treeID, id string) string { return WorkspaceJournals(treeID) + id }

// WorkspaceStaged is the key of a file's content staged for a write-back
// journal, by its hex SHA-256.
func WorkspaceStaged(treeID, sha string) string { return Workspace(treeID) + "staged/" + sha }

// WorkspaceLock is the key of the write lease of a workspace file.
func WorkspaceLock(treeID, cleanPath string) string {
	return Workspace(treeID) + "locks/" + cleanPath
}

// Knowledge is the key of a thread's knowledge render
// (.ai/knowledge/agent/threads/<directive>/<thread_id>.md in the reference).
func Knowledge(directive, threadID string) string {
	return "knowledge/agent/threads/" + directive + "/" + threadID + ".md"
}

// GraphKnowledge is the key of a graph run's knowledge render, with its
// node table.
func GraphKnowledge(graph, runID string) string {
	return "knowledge/graphs/" + graph + "/" + runID + ".md"
}

// Name makes s one safe key segment: every byte outside [A-Za-z0-9._-]
// becomes '_', and "", "." and ".." become "_". Any provider's call id
// is safe through it.
func Name(s string) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if !nameByte(c) {
			b[i] = '_'
		}
	}
	if s := string(b); s != "." && s != ".." {
		return s
	}
	return "_"
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}
