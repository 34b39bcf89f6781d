package worker

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// chainsBundle is the childChains of run parent on the harness's
// registry, with the children it records as started.
type chainsBundle struct {
	*harness
	started []string
}

func (b *chainsBundle) chains(parent string) *childChains {
	return &childChains{reg: b.o.Runtime().Services().Registry, o: b.o.Runtime(), log: slog.New(slog.DiscardHandler), run: parent,
		emit: func(typ string, payload any) {
			if ev, ok := payload.(transcript.ChildSpawned); ok && typ == transcript.TypeChildSpawned {
				b.started = append(b.started, ev.ChildID)
			}
		}}
}

// TestChildChains: the chains read a running child as running (and
// record its start, once, when the transcript did not), an ended child
// by its record, watch and target the thread a chain has reached, and
// settle a wait's thread that is in neither Redis nor the store as lost
// (nil) rather than failing.
func TestChildChains(t *testing.T) {
	t.Parallel()
	b := &chainsBundle{harness: setup(t, nil, Config{})}
	parent := b.startParentOfKid()
	require.NoError(t, b.activate(parent, "start", 0))
	kids, err := b.o.Children(b.ctx, parent)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	kid := kids[0].ThreadID

	c := b.chains(parent)
	p := &pendingStep{Kind: pendingChild, Items: 1, Children: map[string]string{"0": kid}, Slots: map[string]slot{}}
	statuses, ended, err := c.read(b.ctx, p, []string{"0"})
	require.NoError(t, err)
	require.Empty(t, ended)
	rec, running, err := c.end(b.ctx, p, kid, statuses[kid], true, ended[kid])
	require.NoError(t, err)
	require.True(t, running)
	require.Nil(t, rec)
	require.Equal(t, []string{kid}, b.started, "a child the transcript did not record is recorded when found")
	_, _, err = c.end(b.ctx, p, kid, statuses[kid], true, nil)
	require.NoError(t, err)
	require.Len(t, b.started, 1, "and only once")
	require.Equal(t, map[string]bool{kid: true}, c.watch([]string{kid}))
	targets, err := c.targets(b.ctx, []string{kid})
	require.NoError(t, err)
	require.Equal(t, []registry.WaitTarget{{Root: kid, Terminal: kid}}, targets)

	b.drain(false)
	statuses, ended, err = c.read(b.ctx, p, []string{"0"})
	require.NoError(t, err)
	require.Contains(t, ended, kid)
	rec, running, err = c.end(b.ctx, p, kid, statuses[kid], true, ended[kid])
	require.NoError(t, err)
	require.False(t, running)
	require.Equal(t, thread.StatusCompleted, rec.Status)

	lost := "h/kid-1800000000-nowhere"
	w := &pendingStep{Kind: pendingWait, Items: 1, Children: map[string]string{"0": lost}, Slots: map[string]slot{}}
	statuses, ended, err = c.read(b.ctx, w, []string{"0"})
	require.NoError(t, err)
	_, registered := statuses[lost]
	require.False(t, registered)
	rec, running, err = c.end(b.ctx, w, lost, "", false, ended[lost])
	require.NoError(t, err)
	require.False(t, running)
	require.Nil(t, rec, "a thread that left nothing to restore from is lost")
}
