package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// spend is a thread's budget as its activation sees it: the ledger entry
// of its chain (with the path of its ancestors' entries), each turn's
// charge under its idempotency key (thread, turn), and the stop a spent
// budget decides. It holds only what those use; a session has one.
type spend struct {
	ledger  budgetLedger
	thread  string
	entry   string
	path    []string
	log     *slog.Logger
	metrics *Metrics
	// stop: the ledger clamped a charge, or left the thread no room,
	// naming the level (the thread's chain or an ancestor) whose budget
	// is spent: the thread stops before its next turn.
	stop *thread.LimitError
}

// newSpend is the budget of rec's activation.
func newSpend(l budgetLedger, rec *registry.Record, log *slog.Logger, m *Metrics) *spend {
	return &spend{ledger: l, thread: rec.ThreadID, entry: rec.LedgerID(), path: rec.BudgetPath(), log: log, metrics: m}
}

// charge applies turn's spend to the ledger, once per (thread, turn)
// however often it is called.
func (b *spend) charge(ctx context.Context, turn int, amount float64) error {
	key, amount, ok := b.turnCharge(turn, amount)
	if !ok {
		return nil
	}
	c, err := b.ledger.Charge(ctx, b.entry, b.path, key, amount)
	return b.charged(c, err)
}

// turnCharge is turn's charge: its idempotency key (thread, turn) and
// amount; !ok when there is nothing to charge.
func (b *spend) turnCharge(turn int, amount float64) (key string, _ float64, ok bool) {
	if turn == 0 || amount <= 0 {
		return "", 0, false
	}
	return fmt.Sprintf("%s:turn:%d", b.thread, turn), amount, true
}

// charged takes a charge's outcome: a clamped charge is recorded (the
// excess as overrun) in the ledger, and the limit check before the next
// turn stops the thread, as it does when the charge left no room on the
// thread's path; any other error is returned.
func (b *spend) charged(c ledger.Charged, err error) error {
	var le *thread.LimitError
	switch {
	case errors.As(err, &le):
		b.log.Warn("charge exceeded the budget", "error", err)
		b.stop = le
		b.metrics.ledgerRejected("charge")
		return nil
	case err == nil && c.Limiter.ID != "" && c.Left <= 0:
		b.stop = ledger.Exhausted(b.entry, c.Limiter)
	}
	return err
}

// checkRoom reads the room left on the thread's path: a thread that comes
// back from a wait may find that its children or siblings spent its
// budget meanwhile, and stops before a model call it could not pay for.
func (b *spend) checkRoom(ctx context.Context) error {
	if b.stop != nil {
		return nil
	}
	room, err := b.ledger.Room(ctx, b.entry, b.path)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil // no entry (a record older than its ledger): the charge will say
	}
	if err != nil {
		return err
	}
	if room.LeftNano <= 0 {
		b.stop = ledger.Exhausted(b.entry, room.Limiter)
	}
	return nil
}
