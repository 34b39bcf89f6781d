package transcript

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAttest: a checkpoint carries what was attested before it, and only
// that; Attested finds a file by its exact bytes in the verified
// checkpoints, the last one first.
func TestAttest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	writeTranscript(t, s, 3) // turn n's checkpoint attests attestedView(n)
	w := s.writer(t)
	caps := []byte("# Capabilities: t\n")
	w.Attest(ArtifactCapabilities, caps)
	w.Attest(ArtifactThreadJSON, []byte("superseded"))
	w.Attest(ArtifactThreadJSON, attestedView(2)) // attested again, later
	_, err := w.Checkpoint(ctx, State{Iteration: 4})
	require.NoError(t, err)
	_, err = w.Checkpoint(ctx, State{Iteration: 5}) // attests nothing
	require.NoError(t, err)

	tr := s.read(t, Strict)
	require.Len(t, tr.Segments, 5)
	require.Equal(t, int64(1), tr.Attested(ArtifactThreadJSON, attestedView(1)))
	require.Equal(t, int64(4), tr.Attested(ArtifactThreadJSON, attestedView(2)), "the last checkpoint that attests it")
	require.Equal(t, int64(3), tr.Attested(ArtifactThreadJSON, attestedView(3)))
	require.Equal(t, int64(4), tr.Attested(ArtifactCapabilities, caps))
	require.Zero(t, tr.Attested(ArtifactThreadJSON, []byte("superseded")))
	require.Zero(t, tr.Attested(ArtifactCapabilities, attestedView(1)), "attested under another name")
	require.Zero(t, tr.Attested(ArtifactThreadJSON, append(attestedView(3), ' ')))
	require.Empty(t, tr.Segments[4].Artifacts)
}

// TestAttestSurvivesAFailedCheckpoint: what was attested goes with the
// checkpoint that finally commits.
func TestAttestSurvivesAFailedCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSetup(t)
	st := &failStore{Store: s.store, failures: 1}
	w, err := WriterConfig{Now: s.clock.Now}.Open(ctx, st, s.threadID, s.signer, s.keyring)
	require.NoError(t, err)
	w.Attest(ArtifactThreadJSON, attestedView(1))
	_, err = w.Checkpoint(ctx, State{Iteration: 1})
	require.Error(t, err)
	_, err = w.Checkpoint(ctx, State{Iteration: 1})
	require.NoError(t, err)
	tr := s.read(t, Strict)
	require.Equal(t, int64(1), tr.Attested(ArtifactThreadJSON, attestedView(1)))
}
