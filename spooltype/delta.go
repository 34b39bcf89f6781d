package spooltype

// EventDelta is the SSE message name of a Delta on an event stream asked
// for with deltas=true (GET /v1/threads/{id}/events?deltas=true).
const EventDelta = "delta"

// Delta is a piece of the model's text as it is written, before its turn
// is durable: published live while someone follows the thread with
// deltas, never stored (the turn's cognition_out event has the whole
// text once the turn is durable). It carries no event id. Turn is the
// turn being written, Attempt the model call's attempt within it (a call
// retried writes its text again, from offset 0, under the next attempt),
// and Offset where Text starts in the turn's text, in bytes: a reader
// keeps (turn, attempt, offset + len(text)) and skips what it has.
type Delta struct {
	Turn    int    `json:"turn"`
	Attempt int    `json:"attempt,omitempty"`
	Offset  int    `json:"offset"`
	Text    string `json:"text"`
}

// DeltaCursor is where a reader of deltas is: it takes each Delta once,
// in order, and cuts what it has already (a snapshot of a turn's text so
// far that overlaps live deltas). A Delta ahead of what it has (deltas
// dropped on the way) is taken as it is: its Offset says text is missing.
type DeltaCursor struct {
	turn, attempt, have int
}

// Take returns d cut to what the reader does not have, and false when it
// has all of it (or d is of an earlier turn or attempt).
func (c *DeltaCursor) Take(d Delta) (Delta, bool) {
	switch {
	case d.Turn < c.turn || d.Turn == c.turn && d.Attempt < c.attempt:
		return d, false
	case d.Turn > c.turn || d.Attempt > c.attempt:
		c.turn, c.attempt, c.have = d.Turn, d.Attempt, 0
	}
	end := d.Offset + len(d.Text)
	if end <= c.have || d.Text == "" {
		return d, false
	}
	if d.Offset < c.have {
		d.Text, d.Offset = d.Text[c.have-d.Offset:], c.have
	}
	c.have = end
	return d, true
}
