package worker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/transcript"
)

// itemsBundle is the stepItems of run "g/run-1" on an in-memory store,
// with the events it emits kept in order.
type itemsBundle struct {
	store  *blobstore.Memory
	events []transcript.ForeachItemCompleted
	types  []string
}

func newItemsBundle() *itemsBundle { return &itemsBundle{store: blobstore.NewMemory()} }

// items is a fresh activation's stepItems of run (what a restore has).
func (b *itemsBundle) items(run string) *stepItems {
	return &stepItems{store: b.store, run: run, emit: func(typ string, payload any) {
		b.types = append(b.types, typ)
		if ev, ok := payload.(transcript.ForeachItemCompleted); ok {
			b.events = append(b.events, ev)
		}
	}}
}

// foreachPending is a pending foreach of n items and the step running it;
// stopOnError: its on_item_error is not "continue".
func foreachPending(n int, stopOnError bool) (*stepRun, *pendingStep) {
	node := &graph.Node{Name: "each", OnItemError: "continue"}
	if stopOnError {
		node.OnItemError = ""
	}
	return &stepRun{n: node, step: 3}, &pendingStep{Step: 3, Node: "each", Kind: pendingForeach, Items: n,
		Children: map[string]string{}, Slots: map[string]slot{}}
}

// TestStepItems: settled items are durable only once flushed, as one
// stored object of results and an event each naming it; another
// activation reads a result back from that object, checked against its
// digest; a failed item stops a foreach that stops on failure.
func TestStepItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("flush and read back", func(t *testing.T) {
		t.Parallel()
		b := newItemsBundle()
		s, p := foreachPending(3, false)
		it := b.items("g/run-1")
		require.NoError(t, it.settle(s, p, "0", slot{Status: "ok", ThreadID: "c0"}, map[string]any{"n": 1}))
		require.NoError(t, it.settle(s, p, "1", slot{Status: "error", Code: "boom", Message: "it broke", ThreadID: "c1"}, nil))
		require.NoError(t, it.settle(s, p, "2", slot{Status: "ok", ThreadID: "c2"}, map[string]any{"n": 2}))
		require.True(t, it.dirty())
		require.False(t, p.Stopping, "a foreach that continues after a failure does not stop")
		require.Empty(t, b.events, "nothing is recorded before the flush")

		require.NoError(t, it.flush(ctx, p))
		require.False(t, it.dirty())
		require.Len(t, b.events, 3)
		addr := b.events[0].Results
		require.NotEmpty(t, addr)
		require.Equal(t, addr, b.events[2].Results, "one object holds the round's results")
		require.Empty(t, b.events[1].Results, "a failed item has no result")
		require.Equal(t, "boom", b.events[1].Error.Code)
		require.Equal(t, addr, p.Slots["0"].Chunk)
		require.NoError(t, it.flush(ctx, p))
		require.Len(t, b.events, 3, "a flush with nothing settled records nothing")

		// Another activation (a restore) reads the results back.
		again := b.items("g/run-1")
		v, err := again.result(ctx, "2", p.Slots["2"])
		require.NoError(t, err)
		require.Equal(t, map[string]any{"n": float64(2)}, v)
		v, err = again.result(ctx, "1", p.Slots["1"])
		require.NoError(t, err)
		require.Nil(t, v)

		// A digest that is not the stored result's does not verify.
		bad := p.Slots["0"]
		bad.SHA = sha256Hex([]byte(`{"n":7}`))
		_, err = b.items("g/run-1").result(ctx, "0", bad)
		require.ErrorIs(t, err, errStateInvalid)
	})

	t.Run("a failure stops a foreach that stops on one", func(t *testing.T) {
		t.Parallel()
		s, p := foreachPending(2, true)
		it := newItemsBundle().items("g/run-1")
		require.NoError(t, it.settle(s, p, "1", slot{Status: "error", Code: "boom"}, nil))
		require.True(t, p.Stopping)
	})

	t.Run("keep carries a resumed run's settled items", func(t *testing.T) {
		t.Parallel()
		b := newItemsBundle()
		s, old := foreachPending(3, false)
		from := b.items("g/run-1")
		require.NoError(t, from.settle(s, old, "0", slot{Status: "ok", ThreadID: "c0"}, "zero"))
		require.NoError(t, from.settle(s, old, "1", slot{Status: "error", Code: "boom", ThreadID: "c1"}, nil))
		require.NoError(t, from.flush(ctx, old))
		b.events, b.types = nil, nil

		_, keep := foreachPending(3, false)
		it := b.items("g/run-2")
		require.NoError(t, it.keep(ctx, "g/run-1", old, keep))
		require.Equal(t, map[string]string{"0": "c0"}, keep.Children, "only the items that settled ok are kept")
		require.Equal(t, []string{transcript.TypeStepStarted, transcript.TypeForeachItemCompleted}, b.types)
		require.NotEqual(t, old.Slots["0"].Chunk, "", "the old run's object")
		v, err := b.items("g/run-2").result(ctx, "0", keep.Slots["0"])
		require.NoError(t, err)
		require.Equal(t, "zero", v, "the kept result is stored under the new run")
	})
}
