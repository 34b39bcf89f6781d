package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/client"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/transcript"
)

// TestMain checks for leaked goroutines (goleak) once the tests have run
// and the test Redis (pause_test.go) has stopped.
func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// flakyEvents serves events 1..total of thread id as the API does, but
// drops the connection after each `per` events (no end message), and
// records the Last-Event-ID of every request. A connection after the last
// event gets the end message.
type flakyEvents struct {
	id         string
	total, per int64
	// dupes: each connection first repeats the event before the one it
	// resumes after (a server may send what the client has).
	dupes bool

	mu      sync.Mutex
	resumes []string
}

func (f *flakyEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.EscapedPath() != "/v1/threads/"+"t%2Fx-1-a"+"/events" {
		http.Error(w, "wrong path "+r.URL.EscapedPath(), http.StatusNotFound)
		return
	}
	f.mu.Lock()
	f.resumes = append(f.resumes, r.Header.Get("Last-Event-ID"))
	f.mu.Unlock()
	after, _ := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "retry: 5\n\n: keepalive\n\n")
	from := after + 1
	if f.dupes && after > 0 {
		from = after
	}
	sent := int64(0)
	for seq := from; seq <= f.total; seq++ {
		b, _ := json.Marshal(transcript.Event{Timestamp: time.Now(), ThreadID: f.id, Seq: seq, Type: "cognition_out", Payload: json.RawMessage(`{"text":"a\nb"}`)})
		fmt.Fprintf(w, "id: %d\ndata: %s\n\n", seq, b)
		if seq > after {
			sent++
		}
		if sent == f.per && seq < f.total {
			// Half a message, then the connection drops.
			fmt.Fprintf(w, "id: %d\ndata: {\"timest", seq+1)
			return
		}
	}
	b, _ := json.Marshal(api.End{ThreadID: f.id, Status: "completed", LastEventID: f.total})
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", b)
}

// TestEventsResumeAfterDrops: a stream whose connection drops every few
// events (mid-message) yields every event once, in order, resuming each
// time after the last one it got, and ends with the end message.
func TestEventsResumeAfterDrops(t *testing.T) {
	t.Parallel()
	for _, dupes := range []bool{false, true} {
		t.Run(fmt.Sprintf("dupes=%v", dupes), func(t *testing.T) {
			t.Parallel()
			f := &flakyEvents{id: "t/x-1-a", total: 10, per: 3, dupes: dupes}
			s := follow(t, f, 0)
			var got []int64
			for {
				ev, err := s.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				require.Equal(t, "t/x-1-a", ev.ThreadID)
				got = append(got, ev.Seq)
			}
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, got)
			require.Equal(t, 3, s.Reconnects())
			require.Equal(t, []string{"", "3", "6", "9"}, f.resumes)
			require.Equal(t, &api.End{ThreadID: "t/x-1-a", Status: "completed", LastEventID: 10}, s.End())
			_, err := s.Next()
			require.ErrorIs(t, err, io.EOF, "an ended stream stays ended")
		})
	}
}

// TestEventsStartAfter: a stream started after a seq asks for what
// follows it.
func TestEventsStartAfter(t *testing.T) {
	t.Parallel()
	f := &flakyEvents{id: "t/x-1-a", total: 4, per: 100}
	s := follow(t, f, 2)
	ev, err := s.Next()
	require.NoError(t, err)
	require.EqualValues(t, 3, ev.Seq)
	require.Equal(t, []string{"2"}, f.resumes)
}

// follow serves f and follows its thread's events after seq with a
// client; both end with the test.
func follow(t *testing.T, f *flakyEvents, after int64) *client.Stream {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	require.NoError(t, err)
	s := c.Events(t.Context(), f.id, after)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestEventsProblems: a refused stream is the server's problem, not
// retried; an error message ends the stream with its problem; a context
// that ends ends it.
func TestEventsProblems(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer tok-12345678" {
			w.Header().Set("Content-Type", api.ProblemType)
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(api.Problem{Type: "about:blank", Title: "Unauthorized", Status: 401, Code: "unauthorized", Detail: "spool api: authentication required"})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.EscapedPath() == "/v1/threads/slow-1-a/events" {
			fmt.Fprint(w, ": keepalive\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		b, _ := json.Marshal(api.Problem{Type: "about:blank", Title: "Conflict", Status: 409, Code: "transcript_damaged", Detail: "segment 2 tampered"})
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
	}))
	defer srv.Close()

	c, err := client.New(srv.URL)
	require.NoError(t, err)
	s := c.Events(t.Context(), "x-1-a", 0)
	_, err = s.Next()
	var p *api.Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, "unauthorized", p.Code)
	require.True(t, client.IsStatus(err, http.StatusUnauthorized))
	require.EqualValues(t, 1, calls.Load(), "a refused stream is not retried")
	require.NoError(t, s.Close())

	c, err = client.New(srv.URL+"/", client.WithToken("tok-12345678"))
	require.NoError(t, err)
	s = c.Events(t.Context(), "x-1-a", 0)
	_, err = s.Next()
	require.ErrorAs(t, err, &p)
	require.Equal(t, "transcript_damaged", p.Code)
	require.NoError(t, s.Close())

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	s = c.Events(ctx, "slow-1-a", 0)
	_, err = s.Next()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, s.Close())
}

func TestNewRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8081", "ftp://x", "http://"} {
		_, err := client.New(u)
		require.Error(t, err, u)
	}
}
