package ledger

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Uncharged names the keys an entry has no charge under, in order, and
// changes nothing.
func TestUncharged(t *testing.T) {
	t.Parallel()
	f := setup(t)
	l, ctx := f.l, f.ctx
	require.NoError(t, l.Register(ctx, "root", 1))
	_, err := l.Charge(ctx, "root", nil, "root:turn:2", 0.25)
	require.NoError(t, err)

	got, err := l.Uncharged(ctx, "root", []string{"root:turn:1", "root:turn:2", "root:turn:3"})
	require.NoError(t, err)
	require.Equal(t, []string{"root:turn:1", "root:turn:3"}, got)
	e, err := l.Get(ctx, "root")
	require.NoError(t, err)
	require.InDelta(t, 0.25, e.Own, 1e-12)

	_, err = l.Uncharged(ctx, "nobody", []string{"k"})
	require.ErrorIs(t, err, ErrNotFound)
}
