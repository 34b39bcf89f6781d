package spooltype

// EventDelta is the SSE message name of a Delta on an event stream asked
// for with deltas=true (GET /v1/threads/{id}/events?deltas=true).
const EventDelta = "delta"

// Delta is a piece of what the model writes, before its turn is durable:
// its text, or (CallID set) the arguments of one of its tool calls, as
// JSON text. Published live while someone follows the thread with
// deltas, never stored (the turn's cognition_out event has the whole
// text and calls once the turn is durable); it carries no event id. Turn
// is the turn being written, Attempt the model call's attempt within it
// (a call retried writes again, from offset 0, under the next attempt),
// and Offset where Text starts in the turn's text, or in that call's
// arguments, in bytes: a reader keeps, per turn, attempt and call, how
// far it has read (DeltaCursor) and skips what it has.
type Delta struct {
	Turn    int    `json:"turn"`
	Attempt int    `json:"attempt,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	Tool    string `json:"tool,omitempty"`
	Offset  int    `json:"offset"`
	Text    string `json:"text"`
}

// DeltaCursor is where a reader of deltas is: it takes each Delta once,
// in order, and cuts what it has already (a snapshot of the text so far
// that overlaps live deltas). A Delta ahead of what it has (deltas
// dropped on the way) is taken as it is: its Offset says text is missing.
type DeltaCursor struct {
	turn, attempt int
	have          map[string]int // by call id ("": the text)
}

// Take returns d cut to what the reader does not have, and false when it
// has all of it (or d is of an earlier turn or attempt).
func (c *DeltaCursor) Take(d Delta) (Delta, bool) {
	switch {
	case d.Turn < c.turn || d.Turn == c.turn && d.Attempt < c.attempt:
		return d, false
	case c.have == nil || d.Turn > c.turn || d.Attempt > c.attempt:
		c.turn, c.attempt, c.have = d.Turn, d.Attempt, map[string]int{}
	}
	have := c.have[d.CallID]
	end := d.Offset + len(d.Text)
	if end <= have || d.Text == "" {
		return d, false
	}
	if d.Offset < have {
		d.Text, d.Offset = d.Text[have-d.Offset:], have
	}
	c.have[d.CallID] = end
	return d, true
}
