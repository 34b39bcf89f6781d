package thread

import (
	"errors"
	"testing"
)

// TestTransitionTable checks every (from, to) pair against the table the
// spec and doc.go describe.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	allowed := map[[2]Status]bool{
		{StatusCreated, StatusRunning}:   true,
		{StatusCreated, StatusWaiting}:   true, // parked by admission
		{StatusCreated, StatusError}:     true,
		{StatusCreated, StatusCancelled}: true,
		{StatusRunning, StatusWaiting}:   true,
		{StatusRunning, StatusCompleted}: true,
		{StatusRunning, StatusError}:     true,
		{StatusRunning, StatusCancelled}: true,
		{StatusRunning, StatusContinued}: true,
		{StatusWaiting, StatusRunning}:   true,
		{StatusWaiting, StatusError}:     true,
		{StatusWaiting, StatusCancelled}: true,
		{StatusRunning, StatusPaused}:    true, // paused at a boundary
		{StatusWaiting, StatusPaused}:    true, // paused while it waits
		{StatusPaused, StatusRunning}:    true, // its wake-up's claim
		{StatusPaused, StatusWaiting}:    true, // unpaused
		{StatusPaused, StatusError}:      true,
		{StatusPaused, StatusCancelled}:  true,
	}
	for _, from := range Statuses {
		for _, to := range Statuses {
			want := allowed[[2]Status{from, to}]
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
			err := CheckTransition(from, to)
			if want && err != nil {
				t.Errorf("CheckTransition(%s, %s) = %v, want nil", from, to, err)
			}
			if !want {
				var te *TransitionError
				if !errors.As(err, &te) || te.From != from || te.To != to {
					t.Errorf("CheckTransition(%s, %s) = %v, want *TransitionError", from, to, err)
				}
			}
		}
	}
	// Transitions() exports exactly the same table.
	n := 0
	for from, tos := range Transitions() {
		for _, to := range tos {
			n++
			if !allowed[[2]Status{from, to}] {
				t.Errorf("Transitions() has %s → %s, not in the table", from, to)
			}
		}
	}
	if n != len(allowed) {
		t.Errorf("Transitions() has %d pairs, want %d", n, len(allowed))
	}
	if err := CheckTransition(StatusRunning, "bogus"); err == nil {
		t.Error("CheckTransition to an unknown status succeeded")
	}
}

func TestStatusPredicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s                          Status
		valid, terminal, resumable bool
	}{
		{StatusCreated, true, false, false},
		{StatusRunning, true, false, false},
		{StatusWaiting, true, false, false},
		{StatusCompleted, true, true, true},
		{StatusError, true, true, true},
		{StatusCancelled, true, true, true},
		{StatusContinued, true, true, false},
		{"nope", false, false, false},
	}
	for _, tt := range tests {
		if tt.s.Valid() != tt.valid || tt.s.Terminal() != tt.terminal || tt.s.Resumable() != tt.resumable {
			t.Errorf("%s: valid=%v terminal=%v resumable=%v, want %v %v %v", tt.s,
				tt.s.Valid(), tt.s.Terminal(), tt.s.Resumable(), tt.valid, tt.terminal, tt.resumable)
		}
		// A terminal status has no way out.
		if tt.terminal && len(Transitions()[tt.s]) != 0 {
			t.Errorf("terminal %s has transitions %v", tt.s, Transitions()[tt.s])
		}
	}
}
