package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/spooltype"
)

// maxFailures is how many connection attempts in a row a Stream makes
// before it gives up.
const maxFailures = 10

// Stream reads a thread's transcript as server-sent events (GET
// /v1/threads/ID/events). When the connection drops it connects again
// and resumes after the last event it got (Last-Event-ID), so that it
// yields every event once, in seq order, until the server's end message.
// Asked for with EventsOptions.OnDelta, it also passes the model's words
// as they are written to that func. Not safe for concurrent use.
type Stream struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	id     string

	onDelta func(spooltype.Delta)
	deltas  spooltype.DeltaCursor // what onDelta has had, across connections

	last       int64
	resp       *http.Response
	rd         *bufio.Reader
	retry      time.Duration
	failures   int
	reconnects int
	end        *spooltype.End
	err        error // what Next returns from now on
}

// Events streams thread id's transcript events after seq after (0: from
// the first). Close the stream when done.
func (c *Client) Events(ctx context.Context, id string, after int64) *Stream {
	return c.EventsWith(ctx, id, EventsOptions{After: after})
}

// EventsOptions says where a stream of a thread's events starts and
// whether it carries the model's words as they are written.
type EventsOptions struct {
	// After is the seq the stream starts after (0: from the first).
	After int64
	// OnDelta, when set, asks for the model's text and tool calls'
	// arguments as they are written (GET .../events?deltas=true): Next
	// calls it, on its caller's goroutine, with each piece as it comes
	// between the transcript events, which then leave out the
	// token_delta events (a turn's cognition_out has its whole text once
	// it is durable). Pieces are never stored and carry no event id: the
	// first of a connection may be the text of the turn in flight so far
	// (Offset 0), which the stream cuts to what OnDelta has not had, so
	// that across reconnections each byte comes once; a piece lost on
	// the way leaves a gap its successor's Offset shows.
	OnDelta func(spooltype.Delta)
}

// EventsWith streams thread id's transcript events as o says: Events,
// with the model's words as they are written when o.OnDelta is set.
// Close the stream when done.
func (c *Client) EventsWith(ctx context.Context, id string, o EventsOptions) *Stream {
	ctx, cancel := context.WithCancel(ctx)
	return &Stream{c: c, ctx: ctx, cancel: cancel, id: id, last: o.After, retry: time.Second, onDelta: o.OnDelta}
}

// LastEventID is the seq of the last event Next returned (or the after
// the stream started with).
func (s *Stream) LastEventID() int64 { return s.last }

// End is the server's end message once Next has returned io.EOF: the
// thread's status and its last event's seq.
func (s *Stream) End() *spooltype.End { return s.end }

// Reconnects counts the times the stream connected again after its
// connection dropped.
func (s *Stream) Reconnects() int { return s.reconnects }

// Close ends the stream.
func (s *Stream) Close() error {
	s.cancel()
	s.drop()
	if s.err == nil {
		s.err = errors.New("client: stream closed")
	}
	return nil
}

func (s *Stream) drop() {
	if s.resp != nil {
		_ = s.resp.Body.Close()
		s.resp, s.rd = nil, nil
	}
}

// Next returns the next transcript event, passing the deltas that come
// before it to EventsOptions.OnDelta. It returns io.EOF once the
// stream has ended with the thread (End says how), an *spooltype.Problem when
// the server refused the stream (an unknown thread, a credential) or ended
// it with an error (a transcript that failed verification), and the
// context's error when it ends.
func (s *Stream) Next() (spooltype.Event, error) {
	for {
		if s.err != nil {
			return spooltype.Event{}, s.err
		}
		if s.resp == nil {
			if err := s.connect(); err != nil {
				if !s.again(err) {
					s.err = err
				}
				continue
			}
		}
		m, err := s.message()
		if err != nil {
			s.drop()
			s.reconnects++
			if !s.again(err) {
				s.err = err
			}
			continue
		}
		if ev, ok := s.dispatch(m); ok {
			return ev, nil
		}
	}
}

// dispatch takes in a message: an event after s.last is returned (ok), one
// Next has returned already is skipped; a delta goes to s.onDelta; the
// end message ends the stream with io.EOF, and an error message with its
// *spooltype.Problem. A message that does not parse ends the stream with
// an error.
func (s *Stream) dispatch(m message) (ev spooltype.Event, ok bool) {
	switch m.event {
	case "", "message":
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			s.err = fmt.Errorf("client: event stream of %s: an event that is not JSON: %w", s.id, err)
			return spooltype.Event{}, false
		}
		if ev.Seq <= s.last {
			return spooltype.Event{}, false // had it already
		}
		s.last = ev.Seq
		return ev, true
	case spooltype.EventEnd:
		var end spooltype.End
		if err := json.Unmarshal([]byte(m.data), &end); err != nil {
			s.err = fmt.Errorf("client: event stream of %s: end message: %w", s.id, err)
			return spooltype.Event{}, false
		}
		s.end, s.err = &end, io.EOF
		s.drop()
	case spooltype.EventError:
		p := &spooltype.Problem{}
		if err := json.Unmarshal([]byte(m.data), p); err != nil {
			p = &spooltype.Problem{Type: "about:blank", Title: "error", Status: http.StatusInternalServerError, Code: "internal", Detail: m.data}
		}
		s.err = p
		s.drop()
	case spooltype.EventDelta:
		s.delta(m)
	}
	return spooltype.Event{}, false
}

// delta passes the delta message m to s.onDelta, cut to what it has not
// had (a reconnection starts again with the text of the turn in flight
// so far); none when the stream did not ask for deltas.
func (s *Stream) delta(m message) {
	if s.onDelta == nil {
		return
	}
	var d spooltype.Delta
	if err := json.Unmarshal([]byte(m.data), &d); err != nil {
		s.err = fmt.Errorf("client: event stream of %s: a delta that is not JSON: %w", s.id, err)
		return
	}
	if d, ok := s.deltas.Take(d); ok {
		s.onDelta(d)
	}
}

// again waits before the next connection attempt after err, and reports
// whether to make one: not when the context has ended, the server refused
// the stream (4xx), or too many attempts in a row failed.
func (s *Stream) again(err error) bool {
	if s.ctx.Err() != nil {
		s.err = s.ctx.Err()
		return true // Next returns s.err
	}
	var p *spooltype.Problem
	if errors.As(err, &p) && p.Status < 500 {
		return false
	}
	if s.failures++; s.failures > maxFailures {
		return false
	}
	t := time.NewTimer(s.retry)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		s.err = s.ctx.Err()
	case <-t.C:
	}
	return true
}

// connect opens the stream after s.last.
func (s *Stream) connect() error {
	q := url.Values{}
	if s.onDelta != nil {
		q.Set("deltas", "true")
	}
	req, err := s.c.request(s.ctx, http.MethodGet, threadPath(s.id, "events"), q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
	}
	resp, err := s.c.hc.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return readProblem(resp)
	}
	s.resp, s.rd = resp, bufio.NewReader(resp.Body)
	return nil
}

// message is one dispatched server-sent event.
type message struct{ event, id, data string }

// message reads the next message (the SSE format: fields until a blank
// line; comments and retry lines are taken in passing). A connection that
// ends mid-message returns io.ErrUnexpectedEOF, one that ends between
// messages io.EOF.
func (s *Stream) message() (message, error) {
	var m message
	var data []string
	seen := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if seen || line != "" {
				return m, io.ErrUnexpectedEOF
			}
			return m, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if !seen {
				continue
			}
			if data == nil && m.event == "" {
				seen = false // nothing to dispatch (a retry or id alone)
				continue
			}
			m.data = strings.Join(data, "\n")
			s.failures = 0
			return m, nil
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: keepalive
		}
		seen = true
		data = s.field(&m, data, line)
	}
}

// field takes in the field line of a message: its event or its id into m,
// a line of its data appended to data (returned), or the stream's retry
// (milliseconds). A field of another name is ignored.
func (s *Stream) field(m *message, data []string, line string) []string {
	field, value, _ := strings.Cut(line, ":")
	value = strings.TrimPrefix(value, " ")
	switch field {
	case "event":
		m.event = value
	case "data":
		data = append(data, value)
	case "id":
		m.id = value
	case "retry":
		if ms, err := strconv.Atoi(value); err == nil && ms >= 0 {
			s.retry = time.Duration(ms) * time.Millisecond
		}
	}
	return data
}
