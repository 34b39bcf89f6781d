package orchestrator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// runAttested runs a thread of turns turns the way a worker does since
// checkpoints attest its files: the first checkpoint attests
// capabilities.md and thread.json (running), written after it; the last
// attests the final thread.json (AttestFinal), which Finalize writes. It
// returns the final record.
func (s *verifySetup) runAttested(t *testing.T, id string, turns int) *registry.Record {
	t.Helper()
	rec, v, w := s.runThread(t, id, 0) // registered and claimed; its signed views are replaced below
	caps, err := transcript.RenderCapabilities(id, []thread.ToolDef{{Name: "rye/file-system/fs_read"}}, rec.Capabilities)
	require.NoError(t, err)
	running, err := ThreadJSON(rec)
	require.NoError(t, err)
	out := Outcome{Status: thread.StatusCompleted, Result: "done", Cost: thread.Cost{Turns: turns}}
	for turn := 1; turn <= turns; turn++ {
		v, err = s.o.reg.Commit(s.ctx, id, v, registry.Changes{Transcript: RecordMark(w.Mark())})
		require.NoError(t, err)
		_, err = w.Append(transcript.TypeCognitionIn, transcript.CognitionIn{Content: "turn"})
		require.NoError(t, err)
		if turn == 1 {
			w.Attest(transcript.ArtifactCapabilities, caps)
			w.Attest(transcript.ArtifactThreadJSON, running)
		}
		if turn == turns {
			require.NoError(t, s.o.Runtime().AttestFinal(s.ctx, rec, v, &out, w.NextSegment()))
			w.Attest(transcript.ArtifactThreadJSON, out.ThreadJSON.Data)
		}
		_, err = w.Checkpoint(s.ctx, transcript.State{Iteration: turn})
		require.NoError(t, err)
		if turn == 1 {
			require.NoError(t, s.store.Put(s.ctx, blobkey.Capabilities(id), caps))
			require.NoError(t, s.store.Put(s.ctx, blobkey.ThreadJSON(id), running))
		}
	}
	out.Transcript = new(w.Mark())
	require.NoError(t, s.o.Runtime().Finalize(s.ctx, rec, v, out))
	final, err := s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	return final
}

// TestVerifyAttested: thread.json and capabilities.md that checkpoints
// attest verify through them, unsigned, and every change to them, or to
// the segment that attests them, is found.
func TestVerifyAttested(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	ctx := s.ctx
	const id = "t/attest-1"
	tjKey, capKey := blobkey.ThreadJSON(id), blobkey.Capabilities(id)
	signedBefore := s.signer.Signatures()
	final := s.runAttested(t, id, 3)
	// runThread signed the views it wrote first: 2 signatures. The rest
	// is one per checkpoint.
	require.Equal(t, int64(2+3), s.signer.Signatures()-signedBefore)

	tj, err := s.store.Get(ctx, tjKey)
	require.NoError(t, err)
	require.NotContains(t, string(tj), transcript.SignatureField, "the final thread.json is attested, not signed")
	caps, err := s.store.Get(ctx, capKey)
	require.NoError(t, err)
	require.False(t, bytes.HasPrefix(caps, []byte("<!-- rye:signed:")))
	ver, err := s.o.VerifyThread(ctx, id, transcript.Strict)
	require.NoError(t, err)
	require.Equal(t, int64(3), ver.Metadata.ThreadJSONAttested)
	require.Equal(t, int64(1), ver.Metadata.CapabilitiesAttested)
	require.Equal(t, thread.StatusCompleted, ver.Metadata.ThreadJSON.Status)
	require.Equal(t, final.Version, ver.Metadata.ThreadJSON.Version, "AttestFinal foresaw Finalize's version")
	require.Equal(t, int64(3), ver.Metadata.ThreadJSON.Transcript.Segments)
	require.Len(t, ver.Metadata.Capabilities.Tools, 1)

	put := func(key string, data []byte) func() {
		return func() { require.NoError(t, s.store.Put(ctx, key, data)) }
	}
	t.Run("thread.json edited", func(t *testing.T) {
		edited := strings.Replace(string(tj), `"turns":25`, `"turns":250`, 1)
		require.NotEqual(t, string(tj), edited)
		_, err := s.tamper(t, id, transcript.Strict, put(tjKey, []byte(edited)))
		requireTampered(t, err, tjKey, "no verified checkpoint attests its SHA-256")
		require.ErrorIs(t, err, transcript.ErrBadSignature)
		ver, err := s.tamper(t, id, transcript.Lenient, put(tjKey, []byte(edited)))
		require.NoError(t, err)
		require.Nil(t, ver.Metadata.ThreadJSON)
		require.Contains(t, strings.Join(ver.Warnings, "\n"), tjKey)
	})
	t.Run("thread.json given a signature", func(t *testing.T) {
		forged := strings.Replace(string(tj), `{`, `{"_signature":{"algo":"ed25519","canon":"jcs-v1","key_id":"`+s.signer.KeyID()+`","sig":"AAAA"},`, 1)
		_, err := s.tamper(t, id, transcript.Strict, put(tjKey, []byte(forged)))
		requireTampered(t, err, tjKey, "signature")
	})
	t.Run("thread.json of another state, re-signed", func(t *testing.T) {
		other, err := transcript.GenerateKey()
		require.NoError(t, err)
		r := *final
		r.Limits.Turns = 250
		data, err := transcript.SignJSON(&r, other)
		require.NoError(t, err)
		_, err = s.tamper(t, id, transcript.Strict, put(tjKey, data))
		requireTampered(t, err, tjKey, "signature")
		require.ErrorIs(t, err, transcript.ErrUnknownKey)
	})
	t.Run("attesting segment deleted", func(t *testing.T) {
		// The registry's mark catches it first; with the mark lost too,
		// the attestation does.
		_, err := s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, blobkey.Segment(id, 3))) })
		requireTampered(t, err, blobkey.Segment(id, 3), "missing segment")
		_, err = s.tamper(t, id, transcript.Strict, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), "transcript_segments", "0", "transcript_chain_hash", "").Err())
			require.NoError(t, s.store.Delete(ctx, blobkey.Segment(id, 3)))
		})
		requireTampered(t, err, tjKey, "no verified checkpoint attests")
	})
	t.Run("attesting checkpoint edited", func(t *testing.T) {
		seg, err := s.store.Get(ctx, blobkey.Segment(id, 3))
		require.NoError(t, err)
		h := sha256.Sum256(tj)
		sum := hex.EncodeToString(h[:])
		require.Contains(t, string(seg), sum)
		_, err = s.tamper(t, id, transcript.Strict, put(blobkey.Segment(id, 3), bytes.Replace(seg, []byte(sum), []byte(strings.Repeat("0", 64)), 1)))
		requireTampered(t, err, blobkey.Segment(id, 3), "checkpoint signature")
	})
	t.Run("capabilities.md", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, put(capKey, bytes.Replace(caps, []byte("fs_read"), []byte("fs_rm"), 1)))
		requireTampered(t, err, capKey, "no verified checkpoint attests")
		widened, err := transcript.RenderCapabilities(id, nil, []string{"rye.execute.tool.*"})
		require.NoError(t, err)
		_, err = s.tamper(t, id, transcript.Strict, put(capKey, widened))
		requireTampered(t, err, capKey, "no verified checkpoint attests")
		_, err = s.tamper(t, id, transcript.Strict, put(capKey, transcript.SignMarkdown(widened, s.signer, s.o.Now())))
		requireTampered(t, err, capKey, "capabilities differ") // a signed file is checked against the registry too
		ver, err := s.tamper(t, id, transcript.Strict, func() { require.NoError(t, s.store.Delete(ctx, capKey)) })
		require.NoError(t, err)
		require.Nil(t, ver.Metadata.Capabilities)
	})
	t.Run("registry widened", func(t *testing.T) {
		_, err := s.tamper(t, id, transcript.Strict, func() {
			require.NoError(t, s.r.Client.HSet(ctx, s.o.keys.Thread(id), "capabilities", `["rye.execute.tool.*"]`).Err())
		})
		requireTampered(t, err, tjKey, "capabilities")
	})
}

// TestAttestFinalMissed: when Finalize's commit does not land at the
// version AttestFinal foresaw, Finalize signs the thread.json it writes,
// which verifies as a signed one.
func TestAttestFinalMissed(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	const id = "t/attest-2"
	rec, v, w := s.runThread(t, id, 2)
	out := Outcome{Status: thread.StatusCompleted, Result: "done"}
	require.NoError(t, s.o.Runtime().AttestFinal(s.ctx, rec, v-1, &out, w.NextSegment())) // foresees a version one too low
	out.Transcript = new(w.Mark())
	require.NoError(t, s.o.Runtime().Finalize(s.ctx, rec, v, out))
	tj, err := s.store.Get(s.ctx, blobkey.ThreadJSON(id))
	require.NoError(t, err)
	require.Contains(t, string(tj), `"canon":"`+transcript.CanonJCS+`"`)
	ver, err := s.o.VerifyThread(s.ctx, id, transcript.Strict)
	require.NoError(t, err)
	require.Zero(t, ver.Metadata.ThreadJSONAttested)
	require.Equal(t, thread.StatusCompleted, ver.Metadata.ThreadJSON.Status)
}

// TestThreadJSONIsMarshal: an attested thread.json is json.Marshal of the
// record, byte for byte (what verifiers and older workers compare with).
func TestThreadJSONIsMarshal(t *testing.T) {
	for _, rec := range []*registry.Record{
		{ThreadID: "t-1", Status: thread.StatusCreated},
		{ThreadID: "d/x-2", Directive: "d/x", Status: thread.StatusCompleted, ParentID: "p", ContinuationOf: "c0",
			Result: "<b>a & b</b>\u2028", Outputs: map[string]any{"n": 1.5, "s": "é"}, Capabilities: []string{"rye.execute.tool.*"},
			Error: &registry.ErrorInfo{Code: "x", Message: "y"}, Cost: thread.Cost{Turns: 3, Spend: 0.25}},
	} {
		want, err := json.Marshal(rec)
		require.NoError(t, err)
		got, err := ThreadJSON(rec)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
