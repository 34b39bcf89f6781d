package api

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamGate: at most max streams in all and perClient of one
// client; an ended stream makes room (once, however often it ends); the
// memory of closed streams is returned once, after a burst of closes
// that left at most half open, and not on a steady churn.
func TestStreamGate(t *testing.T) {
	t.Parallel()
	g := newStreamGate(3, 2)
	var released atomic.Int32
	g.release = func() { released.Add(1) }
	g.releaseAfter = 50 * time.Millisecond
	a1, r := g.acquire("a")
	require.Empty(t, r)
	a2, r := g.acquire("a")
	require.Empty(t, r)
	_, r = g.acquire("a")
	require.Contains(t, r, "--max-streams-per-client")
	b1, r := g.acquire("b")
	require.Empty(t, r)
	_, r = g.acquire("c")
	require.Contains(t, r, "--max-streams")
	a1()
	a1() // twice: one stream ends once
	c1, r := g.acquire("c")
	require.Empty(t, r, "an ended stream makes room")
	_, r = g.acquire("d")
	require.NotEmpty(t, r, "but only one")

	a2()
	b1()
	require.Eventually(t, func() bool { return released.Load() == 1 }, time.Second, 10*time.Millisecond, "3 open, then 1: released")
	c1()
	time.Sleep(150 * time.Millisecond)
	require.EqualValues(t, 2, released.Load(), "the last one closed: released")

	// A steady churn around many open streams returns nothing.
	g2 := newStreamGate(100, 100)
	g2.release = func() { released.Add(10) }
	g2.releaseAfter = 20 * time.Millisecond
	var open []func()
	for range 10 {
		d, _ := g2.acquire("x")
		open = append(open, d)
	}
	for i := range 5 {
		open[i]()
		d, _ := g2.acquire("x")
		open[i] = d
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	require.EqualValues(t, 2, released.Load(), "10 open throughout: nothing to return")
}
