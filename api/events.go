package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// SSE message names beside the transcript events (which have none, so
// that an EventSource's onmessage gets them): spooltype's.
const (
	EventEnd   = spooltype.EventEnd
	EventError = spooltype.EventError
	EventDelta = spooltype.EventDelta
)

// after reads where a stream resumes: Last-Event-ID, else ?after=.
func after(r *http.Request) (int64, *Problem) {
	v, what := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v == "" {
		v, what = r.URL.Query().Get("after"), "after"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, problem(http.StatusBadRequest, "bad_request", "%s %q: want an event id (a seq, 0 or more)", what, v)
	}
	return n, nil
}

// sse writes the messages of one stream; its writes are serialized, for
// the heartbeat writes from another goroutine.
type sse struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error // the first write error: the client is gone
}

// send writes one message (fields in order: event, id, data) and flushes.
func (s *sse) send(event, id string, data []byte) error {
	var b bytes.Buffer
	if event != "" {
		fmt.Fprintf(&b, "event: %s\n", event)
	}
	if id != "" {
		fmt.Fprintf(&b, "id: %s\n", id)
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteByte('\n')
	return s.write(b.Bytes())
}

func (s *sse) write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, err := s.w.Write(p); err != nil {
		s.err = err
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
	return s.err
}

// deltasParam reads ?deltas= (true or false; absent: false).
func deltasParam(r *http.Request) (bool, *Problem) {
	v := r.URL.Query().Get("deltas")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, problem(http.StatusBadRequest, "bad_request", "deltas %q: want true or false", v)
	}
	return b, nil
}

// events streams thread id's transcript events (orchestrator.Follow) as
// server-sent events, each with its seq as id, after Last-Event-ID. With
// ?deltas=true it interleaves the model's text as it is written:
// messages named delta (spooltype.Delta), without an id, never stored,
// starting with the text of the turn in flight so far; the text then
// comes as deltas only (the transcript's token_delta events are left
// out; cognition_out has each turn's whole text once it is durable).
func (s *server) events(w http.ResponseWriter, r *http.Request, id string) {
	aft, p := after(r)
	if p == nil {
		var deltas bool
		if deltas, p = deltasParam(r); p == nil {
			s.stream(w, r, id, aft, deltas)
			return
		}
	}
	writeProblem(w, r, p)
}

// stream is events once its parameters are read.
func (s *server) stream(w http.ResponseWriter, r *http.Request, id string, aft int64, deltas bool) {
	if s.record(w, r, id) == nil {
		return
	}
	done, refusal := s.streams.acquire(streamClient(r))
	if refusal != "" {
		w.Header().Set("Retry-After", streamRetryAfter)
		writeProblem(w, r, problem(http.StatusTooManyRequests, "too_many_streams", "%s; try again later", refusal))
		return
	}
	defer done()
	out, err := openStream(w)
	if err != nil {
		return // the client left
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go out.heartbeat(ctx, s.cfg.Heartbeat, cancel)

	stopDeltas := func() {}
	if deltas {
		stopDeltas = s.streamDeltas(ctx, out, id)
	}
	// last is the seq of the last event sent: none yet, whatever the
	// client resumes after (an id past the end names no event).
	var last int64
	tr, err := s.cfg.Orch.Follow(ctx, id, orchestrator.FollowOptions{After: aft, Interval: s.cfg.FollowInterval}, func(ev transcript.Event) error {
		if deltas && ev.Type == transcript.TypeTokenDelta {
			last = ev.Seq // its text came as deltas
			return nil
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := out.send("", strconv.FormatInt(ev.Seq, 10), data); err != nil {
			return err
		}
		last = ev.Seq
		return nil
	})
	stopDeltas()
	s.endStream(ctx, out, r, id, last, tr, err)
}

// streamDeltas sends thread id's deltas on out (FollowDeltas) until the
// returned func is called, which returns once they have stopped.
func (s *server) streamDeltas(ctx context.Context, out *sse, id string) func() {
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := s.cfg.Orch.FollowDeltas(dctx, id, func(d orchestrator.Delta) error {
			data, err := json.Marshal(d)
			if err != nil {
				return err
			}
			return out.send(EventDelta, "", data)
		})
		if err != nil && dctx.Err() == nil {
			s.log.Debug("event stream: deltas stopped", "thread_id", id, "error", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// openStream answers 200 with the headers of an event stream, and its
// first message: the delay of a client's reconnection. The error is the
// write's: the client is gone.
func openStream(w http.ResponseWriter) (*sse, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	out := &sse{w: w, rc: http.NewResponseController(w)}
	// A client that reconnects waits a second (the EventSource default is
	// about three).
	if err := out.write([]byte("retry: 1000\n\n")); err != nil {
		return nil, err
	}
	return out, nil
}

// heartbeat writes a comment to the stream each time every passes, until
// ctx ends, so that an idle stream stays open through proxies; a write
// that fails (the client is gone) cancels the stream.
func (s *sse) heartbeat(ctx context.Context, every time.Duration, cancel context.CancelFunc) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.write([]byte(": keepalive\n\n")) != nil {
				cancel()
				return
			}
		}
	}
}

// endStream sends the last message of thread id's stream once Follow
// returned tr and err, last being the seq of the last event sent: a
// problem when following failed or the transcript failed verification,
// else the end, with the thread's status and the last event id: the
// transcript's last seq (when later than the last sent), the id a client
// resumes from, never the id a client asked to resume after when that
// is past the end. Nothing when the client left.
func (s *server) endStream(ctx context.Context, out *sse, r *http.Request, id string, last int64, tr *transcript.Transcript, err error) {
	switch {
	case ctx.Err() != nil || out.err != nil:
		return // the client left
	case err != nil:
		s.log.ErrorContext(ctx, "event stream failed", "thread_id", id, "error", err)
		s.sendProblem(out, r, problemOf(err))
		return
	case len(tr.Warnings) > 0:
		more := ""
		if n := len(tr.Warnings) - 1; n > 0 {
			more = fmt.Sprintf(" (and %d more)", n)
		}
		s.sendProblem(out, r, problem(http.StatusConflict, "transcript_damaged", "transcript of %s failed verification: %s%s; the stream ends with its intact prefix (%s)",
			id, tr.Warnings[0], more, thread.Count(len(tr.Events), "event", "events")))
		return
	}
	rec, err := s.cfg.Orch.Record(ctx, id)
	if err != nil {
		s.sendProblem(out, r, problemOf(err))
		return
	}
	if n := len(tr.Events); n > 0 {
		last = max(last, tr.Events[n-1].Seq)
	}
	data, _ := json.Marshal(End{ThreadID: id, Status: rec.Status, LastEventID: last})
	_ = out.send(EventEnd, "", data)
}

func (s *server) sendProblem(out *sse, r *http.Request, p *Problem) {
	p.Instance = r.URL.EscapedPath()
	data, _ := json.Marshal(p)
	if err := out.send(EventError, "", data); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Debug("event stream: problem not sent", "error", err)
	}
}
