package registry

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
)

// Reconciliation is what the durable transcript says a thread's record
// should at least hold, after Redis lost writes (scheduler's
// reconciliation): zero fields ask for nothing.
type Reconciliation struct {
	// Mark raises the transcript mark (Record.Transcript) to what is
	// durable; like Changes.Transcript, it only ever rises.
	Mark *TranscriptMark
	// MinVersion raises the version to at least this, past every version
	// an activation cut off by the loss may still hold.
	MinVersion int64
}

// Reconciled says what Reconcile changed, and from what.
type Reconciled struct {
	MarkFrom, MarkTo       int64 // segments; equal when the mark was not raised
	VersionFrom, VersionTo int64 // equal when the version was not raised
}

// MarkRaised reports whether the transcript mark was raised.
func (r Reconciled) MarkRaised() bool { return r.MarkTo > r.MarkFrom }

// VersionRaised reports whether the version was raised.
func (r Reconciled) VersionRaised() bool { return r.VersionTo > r.VersionFrom }

// regReconcileScript raises a thread's transcript mark and version to
// what its durable transcript says they were before Redis lost writes. It
// changes neither the status nor updated_at, publishes nothing, and does
// not bump the version otherwise: an activation holding the thread goes
// on unless its version is passed (reconcile.lua).
var regReconcileScript = redisfn.New("reconcile", "", regReconcileLua)

//go:embed reconcile.lua
var regReconcileLua string

// Reconcile raises thread id's transcript mark and version as rc asks
// (see Reconciliation), atomically, and says what it changed.
func (r *Registry) Reconcile(ctx context.Context, id string, rc Reconciliation) (Reconciled, error) {
	markSegments, markHash := "", ""
	if rc.Mark != nil {
		if rc.Mark.Segments < 0 {
			return Reconciled{}, fmt.Errorf("reconcile thread %q: negative transcript mark %d", id, rc.Mark.Segments)
		}
		markSegments, markHash = strconv.FormatInt(rc.Mark.Segments, 10), rc.Mark.ChainHash
	}
	res, err := regReconcileScript.Run(ctx, r.rdb, []string{r.ks.Thread(id)}, markSegments, markHash, max(rc.MinVersion, 0), id).Int64Slice()
	if err != nil {
		return Reconciled{}, scriptError(fmt.Sprintf("reconcile thread %q", id), id, 0, err)
	}
	if len(res) != 4 {
		return Reconciled{}, reply.Unexpected("registry reconcile", res)
	}
	return Reconciled{MarkFrom: res[0], MarkTo: res[1], VersionFrom: res[2], VersionTo: res[3]}, nil
}
