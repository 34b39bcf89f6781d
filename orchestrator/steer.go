package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// SendResult is what Send did.
type SendResult struct {
	ThreadID  string `json:"thread_id"`
	Seq       int64  `json:"seq"`
	Status    string `json:"status"`
	Interrupt bool   `json:"interrupt"`
	// Woken: the thread was waiting and was woken to record the message.
	Woken bool `json:"woken"`
}

// Send queues a person's message for thread id (resolved along its
// continuation chain), which the model sees before its next call: a
// running thread picks it up at its next turn boundary; a waiting thread
// is woken to record it (and waits on). With interrupt, the worker running
// the thread also stops the model call or tool in flight (the turn is
// recorded as interrupted) and the message is delivered at once. A
// finished thread takes no message: registry.ErrFinished.
func (o *Orchestrator) Send(ctx context.Context, id, message, by string, interrupt bool) (*SendResult, error) {
	if strings.TrimSpace(message) == "" {
		return nil, errors.New("the message is empty")
	}
	resolved, err := o.reg.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	sent, err := o.reg.Send(ctx, resolved, registry.InboxMessage{Content: message, By: by, At: o.Now().UTC(), Interrupt: interrupt})
	if err != nil {
		return nil, err
	}
	res := &SendResult{ThreadID: resolved, Seq: sent.Seq, Status: sent.Status, Interrupt: interrupt}
	if sent.Status == string(thread.StatusWaiting) && sent.SuspendSeq > 0 {
		if err := o.enqueueWake(ctx, registry.Wake{ThreadID: resolved, Seq: sent.SuspendSeq}); err != nil {
			return nil, fmt.Errorf("wake %s for the message: %w", resolved, err)
		}
		res.Woken = true
	}
	o.threadLog(resolved).Info("message sent", "seq", sent.Seq, "interrupt", interrupt, "by", by)
	return res, nil
}
