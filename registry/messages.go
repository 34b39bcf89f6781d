package registry

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
)

// WaitingForMessage says a graph run waits at a wait_message node for a
// message of the name its record's message_name holds; its activation
// is due when one is sent (or at wake_at, the wait's timeout, when it
// has one).
const WaitingForMessage = "message"

// GraphMessage is a message kept for a graph run (`spool graph send`),
// which one visit of a wait_message node of its name takes. Seq orders a
// run's messages; the run's checkpoint records, per name, the last it
// took, so each is taken once.
type GraphMessage struct {
	Seq    int64           `json:"seq"`
	Name   string          `json:"name"`
	ID     string          `json:"id,omitempty"`
	Data   json.RawMessage `json:"data"`
	SentAt time.Time       `json:"sent_at"`
	By     string          `json:"by,omitempty"`
}

// MessageSent is what SendMessage did: the message's seq (the first
// one's, for a duplicate), whether its id was sent before (nothing was
// stored), the run's status, and the suspension to wake when the run
// waits for a message of its name (0 otherwise).
type MessageSent struct {
	Seq       int64
	Duplicate bool
	Status    string
	WakeSeq   int64
}

var (
	sendMessageScript = redisfn.New("send_message", "", sendMessageLua)
	//go:embed send_message.lua
	sendMessageLua string

	suspendMessageScript = redisfn.New("suspend_message", "", suspendMessageLua)
	//go:embed suspend_message.lua
	suspendMessageLua string

	trimMessagesScript = redisfn.New("trim_messages", "", trimMessagesLua)
	//go:embed trim_messages.lua
	trimMessagesLua string

	restoreMessagesScript = redisfn.New("restore_messages", "", restoreMessagesLua)
	//go:embed restore_messages.lua
	restoreMessagesLua string
)

// SendMessage keeps m for graph run id, which has not ended (else
// ErrFinished), in one script: durable once it returns. A message whose
// ID the run was sent before is not stored again (Duplicate).
func (r *Registry) SendMessage(ctx context.Context, id string, m GraphMessage) (MessageSent, error) {
	// The script puts the seq first: marshal everything else.
	raw, err := json.Marshal(struct {
		Name   string          `json:"name"`
		ID     string          `json:"id,omitempty"`
		Data   json.RawMessage `json:"data"`
		SentAt time.Time       `json:"sent_at"`
		By     string          `json:"by,omitempty"`
	}{m.Name, m.ID, m.Data, m.SentAt.UTC(), m.By})
	if err != nil {
		return MessageSent{}, err
	}
	res, err := sendMessageScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Messages(id), r.ks.MessageIDs(id)}, m.Name, m.ID, string(raw)).Slice()
	if err != nil {
		return MessageSent{}, scriptError("send a message to "+id, id, 0, err)
	}
	if len(res) != 4 {
		return MessageSent{}, reply.Unexpected("send_message", res)
	}
	return MessageSent{Seq: reply.Int(res[0]), Status: reply.String(res[1]), WakeSeq: reply.Int(res[2]), Duplicate: reply.Int(res[3]) == 1}, nil
}

// Messages are the messages kept for graph run id of name whose seq is
// past after, oldest first.
func (r *Registry) Messages(ctx context.Context, id, name string, after int64) ([]GraphMessage, error) {
	raw, err := r.rdb.LRange(ctx, r.ks.Messages(id), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("messages of %q: %w", id, err)
	}
	var out []GraphMessage
	for _, s := range raw {
		var m GraphMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("messages of %q: %w", id, err)
		}
		if m.Name == name && m.Seq > after {
			out = append(out, m)
		}
	}
	return out, nil
}

// RestoreMessages puts back msgs, messages of graph run id that Redis
// lost (the blob store kept them) and its checkpoint has not recorded as
// taken, in seq order, and raises the run's message counter to at least
// minSeq, so that no later send reuses a seq: how many were put back.
// A message the run still holds is left as it is.
func (r *Registry) RestoreMessages(ctx context.Context, id string, msgs []GraphMessage, minSeq int64) (int, error) {
	args := []any{minSeq}
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return 0, err
		}
		args = append(args, string(b))
	}
	n, err := restoreMessagesScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Messages(id), r.ks.MessageIDs(id)}, args...).Int()
	if err != nil {
		return 0, scriptError("restore the messages of "+id, id, 0, err)
	}
	return n, nil
}

// TrimMessages drops the messages of name kept for run id up to seq
// (taken, and durable in its checkpoint).
func (r *Registry) TrimMessages(ctx context.Context, id, name string, seq int64) error {
	if err := trimMessagesScript.Run(ctx, r.rdb, []string{r.ks.Messages(id)}, name, seq).Err(); err != nil {
		return fmt.Errorf("trim the messages of %q: %w", id, err)
	}
	return nil
}

// SuspendForMessage moves running graph run id (holding version) to
// waiting for a message of name past seq after, until wakeAt (zero: until
// a message comes), in one script with the check that none has come: then
// it returns seq 0 and the run stays as it was, to take it.
func (a *Activations) SuspendForMessage(ctx context.Context, id string, version int64, name string, after int64, wakeAt time.Time) (int64, error) {
	at := ""
	if !wakeAt.IsZero() {
		at = wakeAt.UTC().Format(time.RFC3339Nano)
	}
	res, err := suspendMessageScript.Run(ctx, a.rdb, []string{a.ks.Thread(id), a.ks.Events(id), a.ks.Messages(id)}, version,
		a.now().UTC().Format(time.RFC3339Nano), id, name, after, at).Slice()
	if err != nil {
		return 0, scriptError(fmt.Sprintf("suspend %s for message %s", id, name), id, version, err)
	}
	if len(res) != 1 {
		return 0, reply.Unexpected("suspend_message", res)
	}
	return reply.Int(res[0]), nil
}
