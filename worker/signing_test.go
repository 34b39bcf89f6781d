package worker

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestSignaturesPerThread counts the Ed25519 signatures threads cost, from
// their start to their end, and holds them to one per checkpoint:
// thread.json and capabilities.md are attested by the checkpoints written
// with them, not signed. The files verify, and a change to either is
// found.
func TestSignaturesPerThread(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		replies []reply
		turns   int
	}{
		{"three turns", []reply{call("rye/file-system/fs_write", `{"path":"a.txt","content":"one"}`),
			call("rye/file-system/fs_write", `{"path":"b.txt","content":"two"}`), say("done")}, 3},
		{"one turn", []reply{say("done")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, nil, Config{})
			h.prov.script("h/a", tc.replies...)
			before := h.o.Runtime().Services().Signer.Signatures()
			id := h.start("h/a", thread.Limits{})
			require.NoError(t, h.activate(id, "start", 0))
			signed := h.o.Runtime().Services().Signer.Signatures() - before
			rec := h.record(id)
			require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
			require.Equal(t, tc.turns, rec.Cost.Turns)
			ver, err := h.o.VerifyThread(h.ctx, id, transcript.Strict)
			require.NoError(t, err)
			segments := int64(len(ver.Transcript.Segments))
			t.Logf("a %d-turn thread: %d signatures, %d checkpoints", rec.Cost.Turns, signed, segments)
			require.Equal(t, segments, signed, "one signature per checkpoint")
			require.Equal(t, segments, ver.Metadata.ThreadJSONAttested, "the final checkpoint attests the final thread.json")
			require.Equal(t, int64(1), ver.Metadata.CapabilitiesAttested, "the first checkpoint attests capabilities.md")
			require.Equal(t, rec.Version, ver.Metadata.ThreadJSON.Version)
			require.Equal(t, thread.StatusCompleted, ver.Metadata.ThreadJSON.Status)

			for _, edit := range []struct{ key, old, new string }{
				{blobkey.ThreadJSON(id), `"status":"completed"`, `"status":"error"`},
				{blobkey.Capabilities(id), "rye/file-system/fs_read", "rye/file-system/fs_rm"},
			} {
				key := edit.key
				orig, err := h.o.Runtime().Services().Store.Get(h.ctx, key)
				require.NoError(t, err)
				edited := bytes.Replace(orig, []byte(edit.old), []byte(edit.new), 1)
				require.False(t, bytes.Equal(orig, edited), "%s holds %s", key, edit.old)
				require.NoError(t, h.o.Runtime().Services().Store.Put(h.ctx, key, edited))
				_, err = h.o.VerifyThread(h.ctx, id, transcript.Strict)
				require.ErrorIs(t, err, transcript.ErrTampered, key)
				require.ErrorContains(t, err, key)
				require.NoError(t, h.o.Runtime().Services().Store.Put(h.ctx, key, orig))
			}
		})
	}
}

// TestSignaturesAcrossActivations: a thread that waits on a child and ends
// in a later activation still signs only its checkpoints, and its final
// thread.json is attested by the last of them.
func TestSignaturesAcrossActivations(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.prov.script("h/a", call("rye/agent/threads/thread_directive", `{"directive_name":"h/kid"}`), say("parent done"))
	h.prov.script("h/kid", say("kid done"))
	before := h.o.Runtime().Services().Signer.Signatures()
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, 2, h.drain(false), "the child's start, then the parent's wake")
	signed := h.o.Runtime().Services().Signer.Signatures() - before
	var checkpoints int64
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	for _, tid := range []string{id, kids[0].ThreadID} {
		rec := h.record(tid)
		require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
		ver, err := h.o.VerifyThread(h.ctx, tid, transcript.Strict)
		require.NoError(t, err)
		n := int64(len(ver.Transcript.Segments))
		require.Equal(t, n, ver.Metadata.ThreadJSONAttested)
		checkpoints += n
	}
	require.Equal(t, checkpoints, signed, "the tree's signatures are its checkpoints")
}
