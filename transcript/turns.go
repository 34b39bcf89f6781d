package transcript

import (
	"fmt"
	"time"
)

// Turn is one recorded model turn of a thread: the cognition_out event of
// a model call the thread made (Turn > 0; the messages a continuation or a
// fork opens with are recorded as cognition_out events too, with turn 0,
// and are not turns of the thread), and the results of its tool calls.
type Turn struct {
	// N is the turn's number in its thread, from 1.
	N int
	// Out is the model's answer: text, tool calls with their inputs,
	// usage and spend.
	Out CognitionOut
	// Seq and Time are those of the cognition_out event.
	Seq  int64
	Time time.Time
	// Results are the results of the turn's tool calls, in the order they
	// were recorded (a synchronous spawn's result comes when its child
	// ends, possibly in a later segment); a call without a result (the
	// directive_return that ended the thread, a call cut off) has none.
	Results []ToolCallResult
	// ResultTimes are the timestamps of Results' events.
	ResultTimes []time.Time
	// EndSeq is the seq of the turn's last event that belongs to it: its
	// last tool result, or the cognition_out when there is none.
	EndSeq int64
}

// Result returns the recorded result of call id, if any.
func (t *Turn) Result(callID string) (ToolCallResult, time.Time, bool) {
	for i, r := range t.Results {
		if r.CallID == callID {
			return r, t.ResultTimes[i], true
		}
	}
	return ToolCallResult{}, time.Time{}, false
}

// Turns lists the model turns recorded in events, in order. A tool result
// belongs to the turn whose call it answers; results answering calls of
// the opening messages (turn 0) belong to no turn. A payload that does not
// decode is an error naming the event's seq.
func Turns(events []Event) ([]Turn, error) {
	var turns []Turn
	owner := map[string]int{} // call id → index in turns
	for _, ev := range events {
		switch ev.Type {
		case TypeCognitionOut:
			var p CognitionOut
			if err := ev.Decode(&p); err != nil {
				return nil, fmt.Errorf("turns: event seq %d (%s): %w", ev.Seq, ev.Type, err)
			}
			if p.Turn <= 0 {
				continue
			}
			turns = append(turns, Turn{N: p.Turn, Out: p, Seq: ev.Seq, Time: ev.Timestamp, EndSeq: ev.Seq})
			for _, c := range p.ToolCalls {
				owner[c.ID] = len(turns) - 1
			}
		case TypeToolCallResult:
			var p ToolCallResult
			if err := ev.Decode(&p); err != nil {
				return nil, fmt.Errorf("turns: event seq %d (%s): %w", ev.Seq, ev.Type, err)
			}
			i, ok := owner[p.CallID]
			if !ok {
				continue
			}
			t := &turns[i]
			if _, _, dup := t.Result(p.CallID); dup {
				continue
			}
			t.Results = append(t.Results, p)
			t.ResultTimes = append(t.ResultTimes, ev.Timestamp)
			t.EndSeq = max(t.EndSeq, ev.Seq)
		}
	}
	return turns, nil
}

// ForkPoint is where a fork of a thread at a turn cuts its transcript.
type ForkPoint struct {
	// Turn is the turn forked at, and Turns how many the thread recorded.
	Turn, Turns int
	// Seq is the last event of the prefix: the end of the turn (Turn.EndSeq).
	// Time is that event's timestamp.
	Seq  int64
	Time time.Time
	// Segment is the segment that holds that event and ChainHash its chain
	// hash: the SHA-256 of every transcript byte up to the segment's end,
	// so the prefix a fork carries is named by it (the segment may hold a
	// few events past the cut, such as the turn's checkpoint).
	Segment   int64
	ChainHash string
	// Spend is the thread's own spend over turns 1..Turn (their
	// cognition_out spend).
	Spend float64
	// Children are the threads started (child_spawned) up to Seq.
	Children []string
}

// TurnError is a fork at a turn the thread does not have.
type TurnError struct {
	ThreadID    string
	Turn, Turns int
}

func (e *TurnError) Error() string {
	return fmt.Sprintf("thread %s recorded %d model turns: there is no turn %d to fork at", e.ThreadID, e.Turns, e.Turn)
}

// ForkAt finds where a fork of t at turn n cuts its transcript: the end of
// turn n, after its tool calls' results. t must be verified (Read,
// ReadWith). A turn outside 1..len(turns) is a *TurnError.
func (t *Transcript) ForkAt(n int) (ForkPoint, error) {
	turns, err := Turns(t.Events)
	if err != nil {
		return ForkPoint{}, err
	}
	if n < 1 || n > len(turns) {
		return ForkPoint{}, &TurnError{ThreadID: t.ThreadID, Turn: n, Turns: len(turns)}
	}
	end := turns[n-1].EndSeq
	p := ForkPoint{Turn: n, Turns: len(turns), Seq: end}
	for _, tr := range turns[:n] {
		p.Spend += tr.Out.Spend
	}
	for _, ev := range t.Events {
		if ev.Seq > end {
			break
		}
		p.Time = ev.Timestamp
		if ev.Type == TypeChildSpawned {
			var c ChildSpawned
			if err := ev.Decode(&c); err != nil {
				return ForkPoint{}, fmt.Errorf("fork point: event seq %d (%s): %w", ev.Seq, ev.Type, err)
			}
			p.Children = append(p.Children, c.ChildID)
		}
	}
	for _, s := range t.Segments {
		if s.FirstSeq <= end && end <= s.LastSeq {
			p.Segment, p.ChainHash = s.Number, s.ChainHash
			break
		}
	}
	if p.Segment == 0 {
		return ForkPoint{}, fmt.Errorf("fork point: event seq %d of %s is in no verified segment", end, t.ThreadID)
	}
	return p, nil
}

// Prefix returns the events of t up to and including seq.
func (t *Transcript) Prefix(seq int64) []Event {
	for i, ev := range t.Events {
		if ev.Seq > seq {
			return t.Events[:i]
		}
	}
	return t.Events
}
