package orchestrator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// MessageError refuses a message a run's graph does not take: a name no
// wait_message node waits for (message_unknown), data that fails a
// node's schema (message_invalid), or a bad name, id or data
// (message_invalid). The CLI exits 2 on it, the API answers 422.
type MessageError = graph.MessageError

// ErrRunEnded refuses a message to a graph run that has ended (code
// run_ended).
var ErrRunEnded = errors.New("run_ended")

// maxMessageID bounds a message's id.
const maxMessageID = 200

// GraphMessage is a message for a graph run (SendGraphMessage).
type GraphMessage struct {
	// Name is the message's name: the wait_message nodes of that name
	// take it.
	Name string
	// Data is its data as JSON (empty: null).
	Data json.RawMessage
	// ID, when set, makes the send idempotent: a message of an id the
	// run was sent before is not stored again.
	ID string
	// By is who sent it.
	By string
}

// MessageSent is what SendGraphMessage did.
type MessageSent = spooltype.MessageSent

// SendGraphMessage keeps message m for graph run id (followed along its
// chain to the run that carries it on), durable once it returns: the
// run's wait_message nodes of m's name take it, one a visit, oldest
// first, whether it came before the run reached the node or while it
// waited there (it is then woken). The name must be one the run's graph
// waits for and the data must meet the schema of each node of that name
// (*MessageError); a run that has ended takes none (ErrRunEnded).
func (o *Orchestrator) SendGraphMessage(ctx context.Context, id string, m GraphMessage) (*MessageSent, error) {
	if !graph.ValidMessageName(m.Name) {
		return nil, &MessageError{Code: graph.CodeMessageInvalid, Message: fmt.Sprintf("%q is not a message name: letters, digits, _, . and -, at most 64", m.Name)}
	}
	if err := checkMessageID(m.ID); err != nil {
		return nil, err
	}
	resolved, err := o.reg.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := o.reg.Get(ctx, resolved)
	if err != nil {
		return nil, err
	}
	if !rec.IsGraph() {
		return nil, fmt.Errorf("%s: %w (messages go to graph runs; `spool thread send` sends a thread's model a message)", resolved, ErrNotGraph)
	}
	if rec.Status.Terminal() {
		return nil, runEnded(resolved, rec.Status)
	}
	data, err := o.messageData(ctx, rec, m)
	if err != nil {
		return nil, err
	}
	msg := registry.GraphMessage{Name: m.Name, ID: m.ID, Data: data, SentAt: o.Now().UTC(), By: m.By}
	sent, err := o.reg.SendMessage(ctx, resolved, msg)
	if errors.Is(err, registry.ErrFinished) {
		st, _ := o.reg.Get(ctx, resolved)
		status := thread.Status("ended")
		if st != nil {
			status = st.Status
		}
		return nil, runEnded(resolved, status)
	}
	if err != nil {
		return nil, err
	}
	msg.Seq = sent.Seq
	if err := o.keepMessage(ctx, resolved, msg); err != nil {
		return nil, err
	}
	res := &MessageSent{RunID: resolved, Name: m.Name, Seq: sent.Seq, ID: m.ID, Duplicate: sent.Duplicate, Status: sent.Status}
	if sent.WakeSeq > 0 {
		if err := o.enqueueWake(ctx, registry.Wake{ThreadID: resolved, Seq: sent.WakeSeq}); err != nil {
			return nil, fmt.Errorf("wake %s for the message: %w", resolved, err)
		}
		res.Woken = true
	}
	o.threadLog(resolved).Info("graph message sent", "name", m.Name, "seq", sent.Seq, "id", m.ID, "duplicate", sent.Duplicate, "by", m.By)
	return res, nil
}

// keepMessage stores message m of run id in the blob store, once (a
// duplicate's send stores it when the first's did not), before its send
// returns: a message Redis loses afterwards (a lossy failover, a restart
// without persistence) is put back from there by reconciliation
// (RestoreMessages). It fails the send when the store does: the message
// is then in Redis only, and a send again with the same id keeps it.
func (o *Orchestrator) keepMessage(ctx context.Context, id string, m registry.GraphMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	err = o.store.PutIfAbsent(ctx, blobkey.GraphMessage(id, m.Seq), b)
	if err != nil && !errors.Is(err, blobstore.ErrExists) {
		return fmt.Errorf("keep message %d of %s in the store (it is kept in Redis; send it again with the same id to make it durable): %w", m.Seq, id, err)
	}
	return nil
}

// RestoreMessages puts back the messages of graph run rec, which has not
// ended, that Redis lost and the blob store kept: those past what its
// last durable checkpoint (tr's) records as taken, by name. Its message
// counter is raised past every seq the store or the checkpoint knows, so
// that no later message reuses one. How many were put back.
func (h *Housekeeper) RestoreMessages(ctx context.Context, rec *registry.Record, tr *transcript.Transcript) (int, error) {
	if !rec.IsGraph() || rec.Status.Terminal() {
		return 0, nil
	}
	var cp struct {
		Taken map[string]int64 `json:"messages_taken"`
	}
	if tr != nil && tr.LastState != nil {
		_ = json.Unmarshal(tr.LastState.Extra["graph"], &cp) // none taken when it holds no graph state
	}
	var minSeq int64
	for _, seq := range cp.Taken {
		minSeq = max(minSeq, seq)
	}
	infos, err := h.store.List(ctx, blobkey.GraphMessages(rec.ThreadID))
	if err != nil {
		return 0, fmt.Errorf("messages of %s: %w", rec.ThreadID, err)
	}
	var untaken []registry.GraphMessage
	for _, info := range infos {
		b, err := h.store.Get(ctx, info.Key)
		if err != nil {
			return 0, fmt.Errorf("messages of %s: %w", rec.ThreadID, err)
		}
		var m registry.GraphMessage
		if err := json.Unmarshal(b, &m); err != nil || m.Seq <= 0 {
			h.threadLog(rec.ThreadID).Warn("a stored message does not read; left out", "key", info.Key, "error", err)
			continue
		}
		minSeq = max(minSeq, m.Seq)
		if m.Seq > cp.Taken[m.Name] {
			untaken = append(untaken, m)
		}
	}
	if len(untaken) == 0 && minSeq == 0 {
		return 0, nil
	}
	slices.SortFunc(untaken, func(a, b registry.GraphMessage) int { return cmp.Compare(a.Seq, b.Seq) })
	n, err := h.reg.RestoreMessages(ctx, rec.ThreadID, untaken, minSeq)
	if n > 0 {
		h.threadLog(rec.ThreadID).Warn("put back graph messages Redis lost", "messages", n)
	}
	return n, err
}

// runEnded is the refusal of a message to run id, which ended status.
func runEnded(id string, status thread.Status) error {
	return fmt.Errorf("%w: graph run %s has ended (%s) and takes no message", ErrRunEnded, id, status)
}

// checkMessageID refuses an id that is too long or holds control
// characters.
func checkMessageID(id string) error {
	if len(id) > maxMessageID || strings.IndexFunc(id, unicode.IsControl) >= 0 || (id != "" && strings.TrimSpace(id) == "") {
		return &MessageError{Code: graph.CodeMessageInvalid, Message: fmt.Sprintf("message id %q: at most %d characters, no control characters", id, maxMessageID)}
	}
	return nil
}

// messageData is m's data checked against rec's graph (the version the
// run pinned) and bounded by the state bound: as the run will see it,
// JSON.
func (o *Orchestrator) messageData(ctx context.Context, rec *registry.Record, m GraphMessage) (json.RawMessage, error) {
	proj, g, err := o.pinnedGraph(ctx, rec)
	if err != nil {
		return nil, err
	}
	raw := bytes.TrimSpace(m.Data)
	if len(raw) == 0 {
		raw = []byte("null")
	}
	if limit := proj.Graphs.MaxStateBytes; limit > 0 && len(raw) > limit {
		return nil, &MessageError{Code: graph.CodeMessageInvalid, Message: fmt.Sprintf("message %s: data is %d bytes, over the bound of %d (graphs.yaml max_state_bytes)", m.Name, len(raw), limit)}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, &MessageError{Code: graph.CodeMessageInvalid, Message: fmt.Sprintf("message %s: data is not JSON: %v", m.Name, err)}
	}
	checked, err := g.CheckMessage(m.Name, v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(checked)
}
