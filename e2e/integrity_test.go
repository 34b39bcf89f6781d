package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// finishedThread runs t/files to completion and waits until its final
// thread.json (written by Finalize just after the status commit that
// --wait sees) is in the store.
func finishedThread(t *testing.T, e *spooltest.Env, name string) *registry.Record {
	t.Helper()
	rec := runCompleted(t, e, "t/files", "--input", "name="+name, "--model", "script:scripts/w.yaml")
	require.Eventually(t, func() bool {
		data, err := e.Store.Get(context.Background(), blobkey.ThreadJSON(rec.ThreadID))
		return err == nil && strings.Contains(string(data), `"status":"completed"`)
	}, time.Minute, 50*time.Millisecond)
	return rec
}

type verifyOut struct {
	Verified     bool   `json:"verified"`
	Segments     int    `json:"segments"`
	ThreadJSON   string `json:"thread_json"`
	Capabilities string `json:"capabilities"`
	Error        string `json:"error"`
}

// TestVerifyDeletedTailSegment: deleting the last segment of a finished
// thread leaves a transcript whose hash chain is intact; the transcript
// mark the registry and thread.json recorded at finalization catches it,
// in `spool thread verify` and before a resume uses the transcript.
func TestVerifyDeletedTailSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := workerEnv(t, workerProject(), "2")
	rec := finishedThread(t, e, "tail")
	id := rec.ThreadID

	out := spoolJSON[verifyOut](t, e, "thread", "verify", id, "--json")
	require.Equal(t, verifyOut{Verified: true, Segments: 3, ThreadJSON: "verified", Capabilities: "verified"}, out)
	got, err := e.Orch.Record(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(3), got.Transcript.Segments, "Finalize records the exact segment count")

	last := blobkey.Segment(id, 3)
	require.NoError(t, e.Store.Delete(ctx, last))

	v := e.Spool("thread", "verify", id)
	require.Equal(t, 1, v.Code, "stdout:\n%s\nstderr:\n%s", v.Stdout, v.Stderr)
	require.Contains(t, v.Stderr, last, "the error names the missing segment")
	require.Contains(t, v.Stderr, "missing segment: 2 verified, 3 committed")
	v = e.Spool("thread", "verify", id, "--json")
	require.Equal(t, 1, v.Code)
	out = verifyOut{}
	v.JSON(t, &out)
	require.False(t, out.Verified)
	require.Contains(t, out.Error, last)

	r := e.Spool("thread", "resume", id, "--message", "go on")
	require.Equal(t, 1, r.Code, r.Stdout)
	require.Contains(t, r.Stderr, last, "a resume does not build on a truncated transcript")
}

// TestVerifyTamperedThreadJSON: thread.json and capabilities.md are
// verified by `spool thread verify`: an edited file fails its signature, a
// validly signed file that contradicts the registry fails the comparison.
// verify needs only the trusted public keys, not the signing key.
func TestVerifyTamperedThreadJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := workerEnv(t, workerProject(), "2")
	rec := finishedThread(t, e, "meta")
	id := rec.ThreadID
	tjKey, capKey := blobkey.ThreadJSON(id), blobkey.Capabilities(id)
	orig, err := e.Store.Get(ctx, tjKey)
	require.NoError(t, err)
	origCaps, err := e.Store.Get(ctx, capKey)
	require.NoError(t, err)

	// Read-only commands work with the public keys alone.
	noKey := []string{"SPOOL_SIGNING_KEY=" + filepath.Join(t.TempDir(), "absent", transcript.SigningKeyFile), "SPOOL_TRUSTED_KEYS=" + e.KeyDir}
	v := e.SpoolContext(ctx, noKey, "thread", "verify", id)
	require.Equal(t, 0, v.Code, v.Stderr)
	require.Contains(t, v.Stdout, "verified 3 segments")
	require.Contains(t, v.Stdout, "thread.json verified; capabilities.md verified")
	s := e.SpoolContext(ctx, noKey, "thread", "show", id, "--json")
	require.Equal(t, 0, s.Code, s.Stderr)
	v = e.SpoolContext(ctx, noKey[:1], "thread", "verify", id)
	require.Equal(t, 1, v.Code, "no signing key and no trusted keys: nothing to verify with")
	require.Contains(t, v.Stderr, "no trusted public keys")

	// Edited limits: the signature no longer verifies.
	edited := strings.Replace(string(orig), `"turns":6`, `"turns":60`, 1)
	require.NotEqual(t, string(orig), edited, "thread.json holds the limits: %s", orig)
	require.NoError(t, e.Store.Put(ctx, tjKey, []byte(edited)))
	v = e.Spool("thread", "verify", id)
	require.Equal(t, 1, v.Code, "stdout:\n%s\nstderr:\n%s", v.Stdout, v.Stderr)
	require.Contains(t, v.Stderr, tjKey)
	require.Contains(t, v.Stderr, "signature does not verify")
	r := e.Spool("thread", "resume", id, "--message", "go on")
	require.Equal(t, 1, r.Code, r.Stdout)
	require.Contains(t, r.Stderr, tjKey, "a resume does not use a thread whose thread.json was tampered")

	// Signed, but the registry says otherwise (its limits were raised).
	require.NoError(t, e.Store.Put(ctx, tjKey, orig))
	require.Equal(t, 0, e.Spool("thread", "verify", id).Code)
	raised := rec.Limits
	raised.Turns = 60
	_, err = e.Orch.Runtime().Services().Registry.Commit(ctx, id, 0, registry.Changes{Limits: &raised})
	require.NoError(t, err)
	v = e.Spool("thread", "verify", id)
	require.Equal(t, 1, v.Code)
	require.Contains(t, v.Stderr, tjKey)
	require.Contains(t, v.Stderr, "limits")
	_, err = e.Orch.Runtime().Services().Registry.Commit(ctx, id, 0, registry.Changes{Limits: &rec.Limits})
	require.NoError(t, err)
	require.Equal(t, 0, e.Spool("thread", "verify", id).Code, "a view older than the registry is consistent")

	// capabilities.md: an edited tool list fails its signature.
	editedCaps := strings.Replace(string(origCaps), "fs_read", "fs_rm", 1)
	require.NotEqual(t, string(origCaps), editedCaps, "capabilities.md lists fs_read: %s", origCaps)
	require.NoError(t, e.Store.Put(ctx, capKey, []byte(editedCaps)))
	v = e.Spool("thread", "verify", id)
	require.Equal(t, 1, v.Code)
	require.Contains(t, v.Stderr, capKey)
	require.Contains(t, v.Stderr, "signature does not verify")
}
