package worker

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spool-run/spool/transcript"
)

// Live transcripts. `spool thread transcript --follow` subscribes to the
// thread's live channel and asks, on the control channel, that the worker
// running it publish there (registry.Registry.RequestFollow, repeated while it
// follows). The worker then publishes every event line its transcript
// writer appends, from the lines buffered since the last checkpoint on, as
// they are appended: a model's token deltas (coalesced by the writer),
// tool calls and results, before their checkpoint makes them durable.
// Nobody following costs nothing: without a request, nothing is
// published. It is best effort: a line the publisher cannot keep up with
// is dropped, and the follower reads it from the segment.

// liveBuffer is how many lines wait to be published before new ones are
// dropped.
const liveBuffer = 512

// control is what the control channel reaches of a running activation.
type control struct {
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	followed bool
	start    func() // starts the live feed; nil until the transcript is open
	// turn cancels the turn in flight (an interrupt); nil between turns.
	turn context.CancelCauseFunc
	// deltas publishes the model's text as it is written while the
	// thread is followed; nil until the session has one.
	deltas *deltaFeed
	// renewed is when the activation's lease was last set (unix ns): by
	// the claim, a heartbeat or a checkpoint (renewalDue).
	renewed atomic.Int64
}

// renewalDue says whether the lease of time to live ttl is due for a
// renewal: a third of ttl has passed since it was last set. The heartbeat
// and the checkpoints renew it when it is due, whichever comes first, so
// a thread whose turns are quicker than that renews with its checkpoints
// only every few turns, and its heartbeat not at all.
func (c *control) renewalDue(ttl time.Duration) bool {
	return time.Since(time.Unix(0, c.renewed.Load())) >= ttl/3
}

// interrupt stops the model call or tool of the turn in flight, if any:
// the thread goes on with the next turn, which delivers the message that
// came with the interrupt.
func (c *control) interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.turn != nil {
		c.turn(errInterrupted)
	}
}

// setTurn records the cancel of the turn in flight (nil: none).
func (c *control) setTurn(cancel context.CancelCauseFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turn = cancel
}

// follow records a follow request and starts the feed once it can.
func (c *control) follow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.followed {
		return
	}
	c.followed = true
	if c.start != nil {
		c.start()
	}
	c.deltas.follow()
}

// snapshot publishes the text of the model call in flight so far (a
// reader of deltas subscribed) and starts publishing what comes.
func (c *control) snapshot() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deltas.snapshot()
}

// setDeltas gives the session's delta feed, started at once when a
// follow request came first.
func (c *control) setDeltas(d *deltaFeed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deltas = d
	if c.followed {
		d.follow()
	}
}

// ready gives the feed's start, called at once when a request came first.
func (c *control) ready(start func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start = start
	if c.followed {
		start()
	}
}

// liveFeed publishes a thread's transcript lines on its live channel,
// from the lines its writer buffered since the last checkpoint on, until
// the activation ends (stop). It holds what that uses: the registry's
// channel, the writer and the end of its publisher; a session has one
// once its transcript is open.
type liveFeed struct {
	reg    threadRecords
	thread string
	log    *slog.Logger
	tw     *transcript.Writer
	// done and wg end the publisher (stop); done is nil until start.
	done chan struct{}
	wg   sync.WaitGroup
}

// start publishes the transcript's event lines on the thread's live
// channel until stop.
func (f *liveFeed) start() {
	ch := make(chan []byte, liveBuffer)
	buffered := f.tw.Observe(func(line []byte) {
		select {
		case ch <- bytes.Clone(line):
		default: // the follower reads it from the segment
		}
	})
	f.done = make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		publish := func(line []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := f.reg.PublishLive(ctx, f.thread, line); err != nil {
				f.log.Debug("live transcript line not published", "error", err)
			}
		}
		for _, line := range buffered {
			publish(line)
		}
		for {
			select {
			case line := <-ch:
				publish(line)
			case <-f.done:
				// What was appended before the end: the writer sends no more.
				for len(ch) > 0 {
					publish(<-ch)
				}
				return
			}
		}
	}()
}

// stop ends the feed, if it started, once what was appended is
// published.
func (f *liveFeed) stop() {
	if f.done == nil {
		return
	}
	f.tw.Observe(nil)
	close(f.done)
	f.wg.Wait()
}

// stopLive ends the live feed, if any, once what was appended is published.
func (s *session) stopLive() {
	if s.ctl == nil {
		return
	}
	s.ctl.ready(func() {}) // a request from now on starts nothing
	if s.live != nil {
		s.live.stop()
	}
	s.deltas.stop()
}
