package registry

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
)

// ErrFinished means the thread has finished; it takes no message.
var ErrFinished = errors.New("thread has finished")

// InboxMessage is a user message queued for a thread (`spool thread
// send`, `interrupt`). Seq orders a thread's messages; a worker records
// the last it delivered in its checkpoint, so each is delivered once.
type InboxMessage struct {
	Seq       int64     `json:"seq"`
	Content   string    `json:"content"`
	By        string    `json:"by,omitempty"`
	At        time.Time `json:"at"`
	Interrupt bool      `json:"interrupt,omitempty"`
}

// sendScript queues a message for a thread that has not finished
// (send.lua).
var sendScript = redisfn.New("send", "", sendLua)

//go:embed send.lua
var sendLua string

// Sent is what Send did: the message's sequence number, and the thread's
// status (with its suspension number when it waits).
type Sent struct {
	Seq        int64
	Status     string
	SuspendSeq int64
}

// Send queues msg for thread id (unfinished: else ErrFinished); with
// msg.Interrupt the worker running it is told to stop the work in flight.
func (r *Registry) Send(ctx context.Context, id string, msg InboxMessage) (Sent, error) {
	// The script puts the seq first: marshal everything else.
	raw, err := json.Marshal(struct {
		Content   string    `json:"content"`
		By        string    `json:"by,omitempty"`
		At        time.Time `json:"at"`
		Interrupt bool      `json:"interrupt,omitempty"`
	}{msg.Content, msg.By, msg.At, msg.Interrupt})
	if err != nil {
		return Sent{}, err
	}
	intr := "0"
	if msg.Interrupt {
		intr = "1"
	}
	res, err := sendScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Inbox(id), r.ks.Control(id)}, id, string(raw), intr).Slice()
	if err != nil {
		return Sent{}, scriptError("send to "+id, id, 0, err)
	}
	if len(res) != 3 {
		return Sent{}, reply.Unexpected("send", res)
	}
	return Sent{Seq: reply.Int(res[0]), Status: reply.String(res[1]), SuspendSeq: reply.Int(res[2])}, nil
}

// Signals is what a worker reads before each turn (or graph step) of a
// thread it runs: whether a cancel or a pause was requested, and how many
// messages are queued for it.
type Signals struct {
	Cancel bool
	Pause  bool
	Queued int64
}

// TurnSignals reads the Signals of thread id in one round trip.
func (r *Registry) TurnSignals(ctx context.Context, id string) (Signals, error) {
	pipe := r.rdb.Pipeline()
	h := pipe.HMGet(ctx, r.ks.Thread(id), "thread_id", "cancel_requested", "pause_requested")
	n := pipe.LLen(ctx, r.ks.Inbox(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Signals{}, fmt.Errorf("turn signals of %q: %w", id, err)
	}
	vals := h.Val()
	if len(vals) < 3 || vals[0] == nil {
		return Signals{}, fmt.Errorf("thread %q: %w", id, ErrNotFound)
	}
	return Signals{Cancel: vals[1] == "1", Pause: vals[2] == "1", Queued: n.Val()}, nil
}

// Inbox returns the messages queued for thread id after sequence number
// after, in order.
func (r *Registry) Inbox(ctx context.Context, id string, after int64) ([]InboxMessage, error) {
	raw, err := r.rdb.LRange(ctx, r.ks.Inbox(id), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("inbox of %q: %w", id, err)
	}
	var out []InboxMessage
	for _, s := range raw {
		var m InboxMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("inbox of %q: %w", id, err)
		}
		if m.Seq > after {
			out = append(out, m)
		}
	}
	return out, nil
}

// trimScript drops the inbox messages whose seq is at most ARGV[1]
// (trim_inbox.lua).
var trimScript = redisfn.New("trim_inbox", "", trimLua)

//go:embed trim_inbox.lua
var trimLua string

// TrimInbox drops the messages of thread id up to seq (delivered and
// durable in its transcript).
func (r *Registry) TrimInbox(ctx context.Context, id string, seq int64) error {
	if err := trimScript.Run(ctx, r.rdb, []string{r.ks.Inbox(id)}, seq).Err(); err != nil {
		return fmt.Errorf("trim inbox of %q: %w", id, err)
	}
	return nil
}
