package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TurnCharge is the charge of one model turn as a transcript records it:
// its cognition_out event's turn and spend, and the segment holding it.
type TurnCharge struct {
	Turn    int
	Key     string // ChargeKey
	Amount  float64
	Segment int64
}

// ChargeKey is the ledger idempotency key of a thread's turn: the
// worker charges each turn's spend under it, once.
func ChargeKey(threadID string, turn int) string { return fmt.Sprintf("%s:turn:%d", threadID, turn) }

// RecordedCharges lists the charges of the model turns that tr records
// (cognition_out events with a turn and a spend), in turn order. The
// worker charges exactly these, each under its ChargeKey, so applying
// them again is exact: what the ledger lacks of them, Redis lost.
func RecordedCharges(tr *transcript.Transcript) ([]TurnCharge, error) {
	var out []TurnCharge
	seg := 0
	for _, ev := range tr.Events {
		for seg < len(tr.Segments) && ev.Seq > tr.Segments[seg].LastSeq {
			seg++
		}
		if ev.Type != transcript.TypeCognitionOut {
			continue
		}
		var p transcript.CognitionOut
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return nil, fmt.Errorf("transcript of %s: event %d: %w", tr.ThreadID, ev.Seq, err)
		}
		if p.Turn <= 0 || p.Spend <= 0 {
			continue // a continuation's carried turn, or nothing spent
		}
		var n int64
		if seg < len(tr.Segments) {
			n = tr.Segments[seg].Number
		}
		out = append(out, TurnCharge{Turn: p.Turn, Key: ChargeKey(tr.ThreadID, p.Turn), Amount: p.Spend, Segment: n})
	}
	return out, nil
}

// Recharge applies the charges of cs that rec's chain ledger entry
// (Record.LedgerID, along Record.BudgetPath) lacks, and returns those it
// applied. A charge clamped by a ceiling is applied (as far as it fits)
// and returned too; a released entry takes none (ledger.ErrReleased).
func (h *Housekeeper) Recharge(ctx context.Context, rec *registry.Record, cs []TurnCharge) ([]TurnCharge, error) {
	missing, err := h.lacking(ctx, rec, cs)
	if err != nil {
		return nil, err
	}
	var applied []TurnCharge
	for _, c := range missing {
		_, err := h.ledger.Charge(ctx, rec.LedgerID(), rec.BudgetPath(), c.Key, c.Amount)
		var le *thread.LimitError
		if err != nil && !errors.As(err, &le) {
			return applied, fmt.Errorf("recharge turn %d of %s: %w", c.Turn, rec.ThreadID, err)
		}
		applied = append(applied, c)
	}
	return applied, nil
}

// Reenqueue re-enqueues an activation that housekeeping found due, even
// when the task id it would take is held by a finished task that Redis
// lost the effect of (queue.Enqueuer.Reenqueue). While admission is on
// it is admitted first (admitAndEnqueue): a parked one is not enqueued.
// It reports whether it enqueued.
func (o *Orchestrator) Reenqueue(ctx context.Context, a queue.Activation, seq int64, q string) (bool, error) {
	if o.adm.Policy() == nil {
		return o.enq.Reenqueue(ctx, o.Inspector(), a, seq, q)
	}
	rec, err := o.reg.Get(ctx, a.ThreadID)
	if err != nil {
		return false, err
	}
	return o.admitAndEnqueue(ctx, rec, a, seq, true)
}

// Inspector is an asynq inspector on the orchestrator's Redis. It shares
// the client: do not Close it.
func (o *Orchestrator) Inspector() *asynq.Inspector {
	return asynq.NewInspectorFromRedisClient(o.rdb)
}

// sumNano is the sum of charges in nano-USD, for logs.
func sumNano(cs []TurnCharge) int64 {
	var n int64
	for _, c := range cs {
		v, _ := ledger.ToNano(c.Amount)
		n += v
	}
	return n
}

// ChargedUSD is the sum of cs in USD, exact to the nano-dollar.
func ChargedUSD(cs []TurnCharge) float64 { return ledger.FromNano(sumNano(cs)) }
