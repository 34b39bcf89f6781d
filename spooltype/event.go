package spooltype

import (
	"encoding/json"
	"time"

	"github.com/spool-run/spool/thread"
)

// Event is one transcript line: a JSON object with the keys timestamp,
// thread_id, seq, event_type and payload, in that order. Seq numbers the
// events of one thread from 1, across segments, without gaps. Package
// transcript names the types and their payloads.
type Event struct {
	Timestamp time.Time       `json:"timestamp"`
	ThreadID  string          `json:"thread_id"`
	Seq       int64           `json:"seq"`
	Type      string          `json:"event_type"`
	Payload   json.RawMessage `json:"payload"`
}

// Decode unmarshals the payload into v (one of the payload structs of
// package transcript).
func (e Event) Decode(v any) error { return json.Unmarshal(e.Payload, v) }

// SSE message names of an event stream (GET /v1/threads/ID/events)
// beside the transcript events (which have none, so that an
// EventSource's onmessage gets them).
const (
	// EventEnd closes a stream: the thread has finished and every event
	// was sent. Its data is an End.
	EventEnd = "end"
	// EventError closes a stream early: its data is a Problem (the
	// transcript failed verification, or reading it failed).
	EventError = "error"
)

// End is the data of the "end" message that closes an event stream.
type End struct {
	ThreadID string        `json:"thread_id"`
	Status   thread.Status `json:"status"`
	// LastEventID is the seq of the thread's last event (0 for none).
	LastEventID int64 `json:"last_event_id"`
}
