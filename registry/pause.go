package registry

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/thread"
)

// WaitingForUnpause says a thread paused at a boundary of its activation
// was unpaused and waits for the activation that goes on (its unpause
// enqueues it; housekeeping does, should that be lost: StalledWaits).
const WaitingForUnpause = "unpaused"

// PauseEvent is the status word of a pause request on the events channel
// ("<id> pause"): no status (waiters ignore it), it ends a graph run's
// hold on its children, so that the run suspends, paused.
const PauseEvent = "pause"

// PausedFromField is the hash field (in Record.Extra) of a paused thread
// that names what it waited for when it was paused ("" when its
// activation paused it at a boundary); PausedAtField is when it was
// paused (unix ms).
const (
	PausedFromField = "paused_from"
	PausedAtField   = "paused_at"
)

var (
	pauseScript     = redisfn.New("pause", "", pauseLua)
	pauseSelfScript = redisfn.New("pause_self", "", pauseSelfLua)
	unpauseScript   = redisfn.New("unpause", "", unpauseLua)
)

//go:embed pause.lua
var pauseLua string

//go:embed pause_self.lua
var pauseSelfLua string

//go:embed unpause.lua
var unpauseLua string

// RequestPause asks thread id to pause (pause.lua): it gets
// pause_requested, and one that waits is paused at once (paused true);
// any other unfinished one pauses at the next boundary of the activation
// that holds it or claims it. A finished thread is left as it is. It
// returns the thread's status after the request.
func (r *Registry) RequestPause(ctx context.Context, id string) (st thread.Status, paused bool, err error) {
	now := r.now().UTC()
	res, err := pauseScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Events(id)}, id,
		now.Format(time.RFC3339Nano), now.UnixMilli()).Slice()
	if err != nil {
		return "", false, scriptError("pause thread "+id, id, 0, err)
	}
	if len(res) != 2 {
		return "", false, reply.Unexpected("pause", res)
	}
	return thread.Status(reply.String(res[0])), reply.Int(res[1]) == 1, nil
}

// Unpause lets thread id go on (unpause.lua): its pause request goes,
// and a paused thread waits again, for what it waited for when paused or
// (one its activation paused at a boundary) for its wake-up. seq is that
// suspension's sequence number (0 when the thread was not paused): the
// caller decides whether the wake-up is due (WakeDue) and enqueues it.
func (r *Registry) Unpause(ctx context.Context, id string) (st thread.Status, seq int64, err error) {
	now := r.now().UTC()
	res, err := unpauseScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Events(id)}, id,
		now.Format(time.RFC3339Nano), now.UnixMilli()).Slice()
	if err != nil {
		return "", 0, scriptError("unpause thread "+id, id, 0, err)
	}
	if len(res) != 2 {
		return "", 0, reply.Unexpected("unpause", res)
	}
	return thread.Status(reply.String(res[0])), reply.Int(res[1]), nil
}

// PauseSelf pauses a running thread, held at version by the caller's
// activation and checkpointed, when a pause is requested for it
// (pause_self.lua): it returns the pause's sequence number, which the
// unpause's wake-up presents to Claim, or 0 when no pause is requested
// any more (an unpause came first: the thread goes on at the same
// version).
func (a *Activations) PauseSelf(ctx context.Context, id string, version int64) (int64, error) {
	now := a.now().UTC()
	seq, err := pauseSelfScript.Run(ctx, a.rdb, []string{a.ks.Thread(id), a.ks.Events(id)}, version,
		now.Format(time.RFC3339Nano), now.UnixMilli(), id).Int64()
	if err != nil {
		return 0, scriptError(fmt.Sprintf("pause thread %s", id), id, version, err)
	}
	return seq, nil
}

// WakeDue returns the wake-up of thread id when it waits and should be
// woken now (what it waited for has come while it was paused: its
// children ended, its calls were decided, its timer passed; or it was
// paused at a boundary), as StalledWaits finds it; none otherwise.
func (a *Activations) WakeDue(ctx context.Context, id string) ([]Wake, error) {
	return a.stalledWait(ctx, id)
}
