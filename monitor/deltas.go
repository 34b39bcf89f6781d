package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// deltasMaxStream is how long one /api/threads/ID/deltas stream lasts; the
// page's EventSource connects again after it.
const deltasMaxStream = 10 * time.Minute

// serveDeltas is /api/threads/ID/deltas: a server-sent-event stream of
// what the model of thread id writes as it writes it (messages named
// delta, each a spooltype.Delta: the text of the turn in flight so far
// first, then each piece), which the transcript page shows in its
// "being written" panel until the turn's events arrive. It ends when the
// client leaves or after deltasMaxStream.
func (m *Monitor) serveDeltas(w http.ResponseWriter, r *http.Request, id string) {
	rec, err := m.cfg.Orch.Record(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	if rec.Status.Terminal() {
		w.WriteHeader(http.StatusNoContent) // an EventSource stops on 204
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithTimeout(r.Context(), deltasMaxStream)
	defer cancel()
	send := func(b []byte) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send([]byte("retry: 2000\n\n")) != nil {
		return
	}
	err = m.cfg.Orch.FollowDeltas(ctx, id, func(d orchestrator.Delta) error {
		data, err := json.Marshal(d)
		if err != nil {
			return err
		}
		return send([]byte(fmt.Sprintf("event: %s\ndata: %s\n\n", spooltype.EventDelta, data)))
	})
	if err != nil && ctx.Err() == nil {
		m.cfg.Logger.Debug("deltas stream ended", "thread_id", id, "error", err)
	}
}
