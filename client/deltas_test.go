package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/client"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// deltaServer serves thread t/d-1-a's events with deltas as the API does
// with ?deltas=true, whatever the query: its first connection drops
// mid-delta after event 1 and two pieces of turn 1; the next starts again
// with the snapshot of turn 1 so far (offset 0), as a reconnection does.
// It records each request's query and Last-Event-ID.
type deltaServer struct {
	mu       sync.Mutex
	requests []string
}

func (f *deltaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.URL.RawQuery+" "+r.Header.Get("Last-Event-ID"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "retry: 5\n\n")
	event := func(seq int64) {
		b, _ := json.Marshal(transcript.Event{Timestamp: time.Now(), ThreadID: "t/d-1-a", Seq: seq, Type: "cognition_out", Payload: json.RawMessage(`{}`)})
		fmt.Fprintf(w, "id: %d\ndata: %s\n\n", seq, b)
	}
	delta := func(d spooltype.Delta) {
		b, _ := json.Marshal(d)
		fmt.Fprintf(w, "event: delta\ndata: %s\n\n", b)
	}
	if r.Header.Get("Last-Event-ID") == "" {
		event(1)
		delta(spooltype.Delta{Turn: 1, Offset: 0, Text: "Hel"})
		delta(spooltype.Delta{Turn: 1, Offset: 3, Text: "lo"})
		fmt.Fprint(w, "event: delta\ndata: {\"turn\":1,\"off") // the connection drops
		return
	}
	delta(spooltype.Delta{Turn: 1, Offset: 0, Text: "Hello"}) // the snapshot: had already
	delta(spooltype.Delta{Turn: 1, Offset: 5, Text: ", world"})
	delta(spooltype.Delta{Turn: 1, CallID: "c1", Tool: "t/x", Offset: 0, Text: `{"a":`})
	event(2)
	delta(spooltype.Delta{Turn: 2, Offset: 0, Text: "Bye"})
	delta(spooltype.Delta{Turn: 2, Attempt: 1, Offset: 0, Text: "Bye!"}) // the model call retried
	delta(spooltype.Delta{Turn: 2, Offset: 3, Text: "?"})                // of the attempt before: stale
	b, _ := json.Marshal(api.End{ThreadID: "t/d-1-a", Status: "completed", LastEventID: 2})
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
}

// readAll reads s to its end, logging each event and each delta OnDelta
// got into log, in the order they came.
func readAll(t *testing.T, s *client.Stream, log *[]string) {
	t.Helper()
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		*log = append(*log, fmt.Sprintf("event %d", ev.Seq))
	}
}

// TestEventsWithDeltas: EventsWith with an OnDelta asks for deltas
// (deltas=true) and passes them, interleaved with the events in the order
// they came, each byte once across a reconnection (the snapshot a
// reconnection starts with is cut to what OnDelta has not had), a tool
// call's arguments with their call id, and a retried model call's
// text from its offset 0 (a stale piece of the attempt before is left
// out); it resumes after the last event as Events does. Events asks for
// none and passes none on.
func TestEventsWithDeltas(t *testing.T) {
	t.Parallel()
	f := &deltaServer{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	require.NoError(t, err)

	var log []string
	s := c.EventsWith(t.Context(), "t/d-1-a", client.EventsOptions{OnDelta: func(d spooltype.Delta) {
		what := "delta"
		if d.CallID != "" {
			what = "call " + d.CallID + " " + d.Tool
		}
		log = append(log, fmt.Sprintf("%s %d/%d %d %s", what, d.Turn, d.Attempt, d.Offset, d.Text))
	}})
	t.Cleanup(func() { _ = s.Close() })
	readAll(t, s, &log)
	require.Equal(t, []string{
		"event 1", "delta 1/0 0 Hel", "delta 1/0 3 lo",
		"delta 1/0 5 , world", `call c1 t/x 1/0 0 {"a":`, "event 2", "delta 2/0 0 Bye", "delta 2/1 0 Bye!",
	}, log)
	require.Equal(t, 1, s.Reconnects())
	require.EqualValues(t, 2, s.LastEventID())
	require.Equal(t, []string{"deltas=true ", "deltas=true 1"}, f.requests)

	f.requests, log = nil, nil
	plain := c.Events(t.Context(), "t/d-1-a", 0)
	t.Cleanup(func() { _ = plain.Close() })
	readAll(t, plain, &log)
	require.Equal(t, []string{"event 1", "event 2"}, log, "no OnDelta: deltas are not asked for, and passed on to no one")
	require.Equal(t, []string{" ", " 1"}, f.requests)
}

// TestEventsDeltasThroughTheAPI: the deltas a thread's worker publishes
// (here the test, on the thread's deltas channel, while the stream is
// open) reach OnDelta through a real API, each byte once, the text and a
// tool call's arguments apart; the stream ends with the thread.
func TestEventsDeltasThroughTheAPI(t *testing.T) {
	t.Parallel()
	p := newPauseAPI(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ops := p.client(t, opsToken)
	rec := p.start(t, "acme", "", false)

	got := make(chan spooltype.Delta, 64)
	done := make(chan error, 1)
	s := ops.EventsWith(ctx, rec.ThreadID, client.EventsOptions{OnDelta: func(d spooltype.Delta) { got <- d }})
	go func() {
		defer func() { _ = s.Close() }()
		for {
			if _, err := s.Next(); err != nil {
				done <- err
				return
			}
		}
	}()

	pieces := []spooltype.Delta{{Turn: 1, Offset: 0, Text: "Hello, "}, {Turn: 1, Offset: 0, Text: "Hello, wor"}, {Turn: 1, Offset: 10, Text: "ld"},
		{Turn: 1, CallID: "c1", Tool: "rye/file-system/fs_write", Offset: 0, Text: `{"path":`}}
	var raws [][]byte
	for _, d := range pieces {
		b, err := json.Marshal(d)
		require.NoError(t, err)
		raws = append(raws, b)
	}
	pub, stop := context.WithCancel(ctx)
	published := make(chan struct{})
	go func() {
		defer close(published)
		// Published until the stream has subscribed (a piece before is
		// lost, as pub/sub is): each byte reaches OnDelta once.
		for pub.Err() == nil {
			_ = p.reg.PublishDeltas(pub, rec.ThreadID, raws)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	text, args := "", ""
	for text != "Hello, world" || args != `{"path":` {
		select {
		case d := <-got:
			require.Equal(t, 1, d.Turn)
			if d.CallID != "" {
				require.Equal(t, "rye/file-system/fs_write", d.Tool)
				require.Equal(t, len(args), d.Offset, "each piece once, in order")
				args += d.Text
				continue
			}
			require.Equal(t, len(text), d.Offset, "each piece once, in order")
			text += d.Text
		case err := <-done:
			t.Fatalf("the stream ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("deltas: got %q and %q", text, args)
		}
	}
	stop()
	<-published

	_, err := ops.Cancel(ctx, rec.ThreadID, true)
	require.NoError(t, err)
	require.ErrorIs(t, <-done, io.EOF, "the stream ends with the thread")
	require.Equal(t, thread.StatusCancelled, s.End().Status)
	require.Empty(t, got, "nothing more")
}
