package testenv

import (
	"sync"
	"time"
)

// Clock is a clock a test moves, for the Now a component takes: Now reads
// it (first moving it by its tick, when it has one); Add and Set move it.
// It is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	t    time.Time
	tick time.Duration
}

// NewClock returns a Clock that stands at t until the test moves it.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// NewTickingClock returns a Clock at t that moves on by tick at every
// reading, so that no two readings are equal.
func NewTickingClock(t time.Time, tick time.Duration) *Clock { return &Clock{t: t, tick: tick} }

// Now moves the clock by its tick and returns its time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.tick)
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
