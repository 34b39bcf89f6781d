package worker

import (
	"context"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/transcript"
)

// rechargeLost applies again the charges of the turns that tr (the
// transcript the activation restored) records after mark (the registry's,
// which it opened with) and that the ledger lacks, but for the last
// checkpoint's turn, which charge applies.
//
// The charge of a turn comes with the commit before its segment, and the
// commit that raises the mark past that segment comes after, in the one
// Redis that holds both: every turn up to the mark is charged. Normally the one
// segment past the mark is the last checkpoint's; more means Redis lost
// writes (restarted from an AOF short of its last second), the commits
// and the charges of those turns with them. Each is re-applied under its
// own idempotency key, so this is exact, and costs nothing in the normal
// case.
func (s *session) rechargeLost(ctx context.Context, tr *transcript.Transcript, mark transcript.Mark) error {
	if tr == nil || tr.LastSegment() <= mark.Segments+1 {
		return nil
	}
	all, err := orchestrator.RecordedCharges(tr)
	if err != nil {
		return err
	}
	var lost []orchestrator.TurnCharge
	for _, c := range all {
		if c.Segment > mark.Segments && c.Turn != s.st.Turn {
			lost = append(lost, c)
		}
	}
	applied, err := s.o.Recharge(ctx, s.rec, lost)
	if len(applied) > 0 {
		s.log.Warn("recharged turns the ledger lost", "turns", len(applied), "spend", orchestrator.ChargedUSD(applied),
			"registry_mark", mark.Segments, "segments", tr.LastSegment())
		s.w.metrics.recharged(len(applied))
	}
	return err
}
