package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/thread"
)

// charge applies the last turn's spend to the ledger, once per (thread,
// turn) however often it is called.
func (s *session) charge(ctx context.Context) error {
	key, amount, ok := s.turnCharge()
	if !ok {
		return nil
	}
	c, err := s.ledger.Charge(ctx, s.rec.LedgerID(), s.rec.BudgetPath(), key, amount)
	return s.charged(c, err)
}

// turnCharge is the last turn's charge: its idempotency key (thread, turn)
// and amount; !ok when there is nothing to charge.
func (s *session) turnCharge() (key string, amount float64, ok bool) {
	if s.st.Turn == 0 || s.st.TurnSpend <= 0 {
		return "", 0, false
	}
	return fmt.Sprintf("%s:turn:%d", s.id(), s.st.Turn), s.st.TurnSpend, true
}

// charged takes a charge's outcome: a clamped charge is recorded (the
// excess as overrun) in the ledger, and the limit check before the next
// turn stops the thread, as it does when the charge left no room on the
// thread's path; any other error is returned.
func (s *session) charged(c ledger.Charged, err error) error {
	var le *thread.LimitError
	switch {
	case errors.As(err, &le):
		s.log.Warn("charge exceeded the budget", "error", err)
		s.budgetStop = le
		s.w.metrics.ledgerRejected("charge")
		return nil
	case err == nil && c.Limiter.ID != "" && c.Left <= 0:
		s.budgetStop = ledger.Exhausted(s.rec.LedgerID(), c.Limiter)
	}
	return err
}

// checkRoom reads the room left on the thread's path: a thread that comes
// back from a wait may find that its children or siblings spent its
// budget meanwhile, and stops before a model call it could not pay for.
func (s *session) checkRoom(ctx context.Context) error {
	if s.budgetStop != nil {
		return nil
	}
	room, err := s.ledger.Room(ctx, s.rec.LedgerID(), s.rec.BudgetPath())
	if errors.Is(err, ledger.ErrNotFound) {
		return nil // no entry (a record older than its ledger): the charge will say
	}
	if err != nil {
		return err
	}
	if room.LeftNano <= 0 {
		s.budgetStop = ledger.Exhausted(s.rec.LedgerID(), room.Limiter)
	}
	return nil
}
