package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/spooltype"
)

// Deltas. While a thread is followed (RequestFollow, as for the live
// transcript), its worker publishes the model's text, and its tool
// calls' arguments, as the provider streams them, on the thread's deltas channel (registry.Registry.Deltas):
// one spooltype.Delta per piece, with the turn, the call's attempt and
// its offset in the turn's text. A reader that subscribes asks once for
// the text so far (RequestDeltas: a "deltas" control request), which is
// published as one Delta from offset 0; its spooltype.DeltaCursor cuts
// what overlaps. Nothing is stored, and the turn never waits for a
// reader: pieces wait in a bounded buffer for the publisher, and those
// that do not fit are dropped (a reader sees the gap in the offsets; the
// turn's cognition_out event has the whole text once it is durable).

// deltaBuffer is how many pieces wait to be published before new ones
// are dropped.
const deltaBuffer = 1024

// deltaFeed is one activation's deltas: the text of the model call in
// flight, and the publisher once someone follows.
type deltaFeed struct {
	publish func(ctx context.Context, deltas [][]byte) error
	log     *slog.Logger

	mu      sync.Mutex
	on      bool // followed: pieces are published
	stopped bool // the activation ended: nothing starts
	turn    int
	attempt int
	text    strings.Builder // the call's text so far
	// calls are the arguments of its tool calls so far, in the order
	// they began.
	calls []*toolArgs
	ch    chan []byte
	done  chan struct{}
	wg    sync.WaitGroup
}

// newDeltaFeed is the feed of a thread whose pieces publish publishes.
func newDeltaFeed(publish func(ctx context.Context, deltas [][]byte) error, log *slog.Logger) *deltaFeed {
	return &deltaFeed{publish: publish, log: log}
}

// call starts a model call's text: turn and its attempt.
func (d *deltaFeed) call(turn, attempt int) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.turn, d.attempt = turn, attempt
	d.text.Reset()
	d.calls = nil
}

// toolArgs are a tool call's arguments as written so far.
type toolArgs struct {
	id, tool string
	args     strings.Builder
}

// addTool takes a piece of a tool call's arguments, as add does text.
func (d *deltaFeed) addTool(td provider.ToolDelta) {
	if d == nil || td.Args == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var c *toolArgs
	for _, x := range d.calls {
		if x.id == td.ID {
			c = x
		}
	}
	if c == nil {
		c = &toolArgs{id: td.ID, tool: td.Name}
		d.calls = append(d.calls, c)
	}
	off := c.args.Len()
	c.args.WriteString(td.Args)
	if d.on && !d.stopped {
		d.queue(spooltype.Delta{Turn: d.turn, Attempt: d.attempt, CallID: c.id, Tool: c.tool, Offset: off, Text: td.Args})
	}
}

// add takes a piece of the call's text, on the provider's goroutine: it
// never waits for the publisher.
func (d *deltaFeed) add(text string) {
	if d == nil || text == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	off := d.text.Len()
	d.text.WriteString(text)
	if d.on && !d.stopped {
		d.queue(spooltype.Delta{Turn: d.turn, Attempt: d.attempt, Offset: off, Text: text})
	}
}

// follow starts publishing (a follow request came): from the text so
// far, when the feed was off (an activation a reader followed since
// before it began hears of the reader only at its next request).
func (d *deltaFeed) follow() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.startLocked() {
		d.queueSoFar()
	}
}

// snapshot publishes the call's text so far (a reader subscribed), and
// starts publishing.
func (d *deltaFeed) snapshot() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startLocked()
	d.queueSoFar()
}

// queueSoFar queues the call's text so far, and each tool call's
// arguments so far, each as one delta from offset 0.
func (d *deltaFeed) queueSoFar() {
	if !d.on || d.stopped {
		return
	}
	if d.text.Len() > 0 {
		d.queue(spooltype.Delta{Turn: d.turn, Attempt: d.attempt, Offset: 0, Text: d.text.String()})
	}
	for _, c := range d.calls {
		d.queue(spooltype.Delta{Turn: d.turn, Attempt: d.attempt, CallID: c.id, Tool: c.tool, Offset: 0, Text: c.args.String()})
	}
}

// startLocked starts the publisher once; true when it started it now.
func (d *deltaFeed) startLocked() bool {
	if d.on || d.stopped {
		return false
	}
	d.on = true
	d.ch = make(chan []byte, deltaBuffer)
	d.done = make(chan struct{})
	d.wg.Add(1)
	go d.run()
	return true
}

// queue hands delta to the publisher, or drops it when the buffer is
// full.
func (d *deltaFeed) queue(delta spooltype.Delta) {
	raw, err := json.Marshal(delta)
	if err != nil {
		return
	}
	select {
	case d.ch <- raw:
	default: // a slow publisher drops pieces, never the turn
	}
}

// deltaBatch is the most pieces one round trip publishes.
const deltaBatch = 64

// run publishes until stop, then what was queued before it: what is
// queued when the publisher is free goes in one round trip.
func (d *deltaFeed) run() {
	defer d.wg.Done()
	batch := make([][]byte, 0, deltaBatch)
	send := func(first []byte) {
		batch = append(batch[:0], first)
		for len(batch) < deltaBatch && len(d.ch) > 0 {
			batch = append(batch, <-d.ch)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := d.publish(ctx, batch); err != nil {
			d.log.Debug("deltas not published", "pieces", len(batch), "error", err)
		}
	}
	for {
		select {
		case raw := <-d.ch:
			send(raw)
		case <-d.done:
			for len(d.ch) > 0 {
				send(<-d.ch)
			}
			return
		}
	}
}

// stop ends the publisher, if it started, once what was queued is
// published; a request after it starts nothing.
func (d *deltaFeed) stop() {
	if d == nil {
		return
	}
	d.mu.Lock()
	started := d.on && !d.stopped
	d.stopped = true
	d.mu.Unlock()
	if started {
		close(d.done)
		d.wg.Wait()
	}
}
