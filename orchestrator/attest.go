package orchestrator

import (
	"context"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// Files written beside a thread's turns (thread.json, capabilities.md)
// are attested, not signed: the checkpoint written with them carries
// their SHA-256 (transcript.Writer.Attest), so the checkpoint's one
// signature covers them, and VerifyThread finds them in the verified
// transcript (transcript.Transcript.Attested). What no checkpoint can
// attest is still signed: a thread.json Finalize writes for a thread no
// worker holds (a cancelled waiting thread), for a worker that recovers
// a finalization another one began, or after a resume logged in the old
// thread; and everything written before attestation.

// AttestedThreadJSON is a thread.json a checkpoint attests, and the
// registry version it shows.
type AttestedThreadJSON struct {
	Version int64
	Data    []byte
}

// ThreadJSON is rec as an attested thread.json holds it: its JSON,
// unsigned. It is json.Marshal(rec) byte for byte, without the second pass
// json.Marshal makes over what a MarshalJSON method returns.
func ThreadJSON(rec *registry.Record) ([]byte, error) { return rec.MarshalJSON() }

// AttestFinal prepares the thread.json of a thread that ends with out
// for the caller's final checkpoint to attest (Writer.Attest
// out.ThreadJSON.Data as transcript.ArtifactThreadJSON), instead of
// Finalize signing one: rec as Finalize(rec, version, out) will leave it,
// its transcript mark naming segment, the number of that checkpoint's
// segment (without a chain hash: the segment's hash covers the file, not
// the other way round). It bounds and tidies out as Finalize does, and
// sets out.ThreadJSON; Finalize writes it when its commit lands at the
// version it shows (a handoff's link counted), and signs a thread.json
// of its own otherwise.
func (rt *Runtime) AttestFinal(ctx context.Context, rec *registry.Record, version int64, out *Outcome, segment int64) error {
	out.Error = out.Error.Tidy()
	if err := rt.boundOutcome(ctx, rec.ThreadID, out); err != nil {
		return err
	}
	v := version + 1 // the commit
	if out.ContinuationID != "" {
		v++ // and the link
	}
	shown := *out
	shown.Transcript = &transcript.Mark{Segments: segment}
	data, err := ThreadJSON(finalRecord(rec, v, shown, rt.Now()))
	if err != nil {
		return err
	}
	out.ThreadJSON = &AttestedThreadJSON{Version: v, Data: data}
	return nil
}

// writeFinalThreadJSON writes thread.json once Finalize committed final:
// the one the final checkpoint attests, when it shows final's version,
// else final signed.
func (o *Orchestrator) writeFinalThreadJSON(ctx context.Context, final *registry.Record, attested *AttestedThreadJSON) error {
	if attested != nil && attested.Version == final.Version {
		// A view: the registry holds the record.
		return blobstore.PutView(ctx, o.store, blobkey.ThreadJSON(final.ThreadID), attested.Data)
	}
	return o.WriteThreadJSON(ctx, final)
}
