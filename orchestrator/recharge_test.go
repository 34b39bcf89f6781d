package orchestrator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/ledger"
)

// TestRecharge: of a thread's turn charges, Recharge applies those its
// ledger entry lacks, in the order given, and returns them; again it
// applies none. uncharged picks the same ones without applying them, and
// all of them when the entry is gone, where Recharge fails with
// ledger.ErrNotFound.
func TestRecharge(t *testing.T) {
	t.Parallel()
	o, _, digest := startSetup(t)
	ctx := t.Context()
	rec, _, _ := runLost(t, o, StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, Bundle: digest},
		[]float64{0.01, 0.02}, false)
	id := rec.ThreadID
	charge := func(turn int, amount float64) TurnCharge {
		return TurnCharge{Turn: turn, Key: ChargeKey(id, turn), Amount: amount, Segment: int64(turn)}
	}
	all := []TurnCharge{charge(4, 0.04), charge(1, 0.01), charge(3, 0.03), charge(2, 0.02)}
	lost := []TurnCharge{charge(4, 0.04), charge(3, 0.03)}

	for _, cs := range [][]TurnCharge{nil, {}} {
		got, err := o.uncharged(ctx, rec, cs)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = o.Housekeeper().Recharge(ctx, rec, cs)
		require.NoError(t, err)
		require.Empty(t, got)
	}
	got, err := o.uncharged(ctx, rec, all)
	require.NoError(t, err)
	require.Equal(t, lost, got)

	applied, err := o.Housekeeper().Recharge(ctx, rec, all)
	require.NoError(t, err)
	require.Equal(t, lost, applied)
	e, err := o.ledger.Get(ctx, rec.LedgerID())
	require.NoError(t, err)
	require.Equal(t, nano(t, 0.01, 0.02, 0.04, 0.03), e.OwnNano, "each turn once")

	applied, err = o.Housekeeper().Recharge(ctx, rec, all)
	require.NoError(t, err)
	require.Empty(t, applied, "nothing lacks now")
	got, err = o.uncharged(ctx, rec, all)
	require.NoError(t, err)
	require.Empty(t, got)

	gone := *rec
	gone.ThreadID, gone.ChainRootID = "test/leads-1795000000-nothingdur", ""
	got, err = o.uncharged(ctx, &gone, all)
	require.NoError(t, err)
	require.Equal(t, all, got, "no entry: every charge is lacking")
	_, err = o.Housekeeper().Recharge(ctx, &gone, all)
	require.ErrorIs(t, err, ledger.ErrNotFound)
}
