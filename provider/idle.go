package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultStreamIdle is Config.StreamIdle's default: how long a streamed
// call may go without an event before it is given up as stalled. It is
// long on purpose: Anthropic sends pings while a model thinks, but a
// reasoning model behind the Chat Completions API may say nothing until it
// has thought, for minutes (`spool worker --stream-idle` tightens it).
const DefaultStreamIdle = 10 * time.Minute

// errStalled is the cause of a streamed call given up for silence.
var errStalled = errors.New("stream stalled")

// streamIdle is the idle bound of cfg's streamed calls; 0: none.
func (c Config) streamIdle() time.Duration {
	switch {
	case c.StreamIdle < 0:
		return 0
	case c.StreamIdle == 0:
		return DefaultStreamIdle
	}
	return c.StreamIdle
}

// watchIdle returns, for a streamed call, ctx cancelled with errStalled
// (ctxError: a transient error, retried) when touch has not been called
// for d, touch, which each event calls, and stop, which releases the
// watch; d 0 watches nothing. A stalled connection otherwise held the
// worker's slot and the rate limiter's lease until the thread's duration
// limit ended the thread.
func watchIdle(ctx context.Context, d time.Duration) (watched context.Context, touch, stop func()) {
	if d <= 0 {
		return ctx, func() {}, func() {}
	}
	watched, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(d, func() { cancel(fmt.Errorf("%w: no event for %s", errStalled, d)) })
	return watched, func() { t.Reset(d) }, func() { t.Stop(); cancel(nil) }
}
