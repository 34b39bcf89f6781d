package registry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/thread"
)

// StatusEvent is one message of the events channel (a thread's new
// status) or of the cancels channel (status "cancel": a cancel request).
type StatusEvent struct {
	ThreadID string
	Status   string
}

// Subscription delivers status events until Close. Pub/sub is at-most-once:
// a subscriber that needs certainty re-reads the registry after
// subscribing and now and then (as WaitTerminal does).
type Subscription struct {
	// C receives the events; it is closed by Close.
	C <-chan StatusEvent

	ps   *redis.PubSub
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Subscribe subscribes to the events channel (status changes). When it
// returns, the subscription is confirmed by the server: every status
// change published afterwards is delivered.
func (r *Registry) Subscribe(ctx context.Context) (*Subscription, error) {
	return r.subscribe(ctx, r.ks.AllEvents()...)
}

// SubscribeControl subscribes to the control channel, the workers': events
// with status "cancel", one per cancel request (RequestCancel), and
// "follow", one per follow request (RequestFollow).
func (r *Registry) SubscribeControl(ctx context.Context) (*Subscription, error) {
	return r.subscribe(ctx, r.ks.AllControl()...)
}

// RequestFollow asks the worker running thread id, if any, to publish its
// transcript events live (Live) for the next minute or so: a follower
// repeats it while it follows (FollowRefresh), so that the next activation,
// on whatever worker, publishes too.
//
// The request also marks the thread followed for three refreshes
// (FollowedField), which an activation that begins meanwhile reads in
// its claimed record: it publishes from its start, not from the next
// request.
func (r *Registry) RequestFollow(ctx context.Context, id string) error {
	until := r.now().Add(3 * FollowRefresh).UnixMilli()
	if err := followScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Control(id)}, id, until).Err(); err != nil {
		return fmt.Errorf("follow thread %q: %w", id, err)
	}
	return nil
}

// FollowedField is the hash field (in Record.Extra) until which (unix
// ms) a thread is followed (RequestFollow).
const FollowedField = "followed_until"

// Followed reports whether rec was followed at now (FollowedField).
func Followed(rec *Record, now time.Time) bool {
	n, err := strconv.ParseInt(rec.Extra[FollowedField], 10, 64)
	return err == nil && now.UnixMilli() < n
}

// followScript is follow.lua.
var followScript = redisfn.New("follow", "", followLua)

//go:embed follow.lua
var followLua string

// RequestDeltas asks the worker running thread id, if any, to publish
// the text of the turn being written so far on its deltas channel
// (Deltas), then what the model writes as it comes, while it is followed
// (RequestFollow): a reader of deltas asks once, when it subscribes.
func (r *Registry) RequestDeltas(ctx context.Context, id string) error {
	if err := r.rdb.Publish(ctx, r.ks.Control(id), id+" deltas").Err(); err != nil {
		return fmt.Errorf("deltas of thread %q: %w", id, err)
	}
	return nil
}

// PublishDeltas publishes pieces of the model's text (each a
// spooltype.Delta, as JSON) on thread id's deltas channel, in order, in
// one round trip.
func (r *Registry) PublishDeltas(ctx context.Context, id string, deltas [][]byte) error {
	ch := r.ks.Deltas(id)
	if len(deltas) == 1 {
		return r.rdb.Publish(ctx, ch, deltas[0]).Err()
	}
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range deltas {
			p.Publish(ctx, ch, d)
		}
		return nil
	})
	return err
}

// Deltas subscribes to thread id's deltas channel: the model's text as
// its worker publishes it while the thread is followed (RequestFollow,
// RequestDeltas). At most once, never stored.
func (r *Registry) Deltas(ctx context.Context, id string) (*redis.PubSub, error) {
	ps := r.rdb.Subscribe(ctx, r.ks.Deltas(id))
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe to the deltas of %q: %w", id, err)
	}
	return ps, nil
}

// FollowRefresh is how often a follower repeats RequestFollow.
const FollowRefresh = 2 * time.Second

// PublishLive publishes an event line of thread id's transcript on its
// live channel.
func (r *Registry) PublishLive(ctx context.Context, id string, line []byte) error {
	return r.rdb.Publish(ctx, r.ks.Live(id), line).Err()
}

// Live subscribes to thread id's live channel: the transcript event lines
// its worker publishes while someone follows it (RequestFollow), as they
// are appended, before they are durable. At most once: a line may be
// lost, and the segments have every event.
func (r *Registry) Live(ctx context.Context, id string) (*redis.PubSub, error) {
	ps := r.rdb.Subscribe(ctx, r.ks.Live(id))
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe to the live transcript of %q: %w", id, err)
	}
	return ps, nil
}

func (r *Registry) subscribe(ctx context.Context, channels ...string) (*Subscription, error) {
	ps := r.rdb.Subscribe(ctx, channels...)
	// One confirmation per channel (one per shard of a sharded space):
	// when the last has come, every channel delivers what is published
	// afterwards. A message that comes between confirmations is kept.
	var early []*redis.Message
	for confirmed := 0; confirmed < len(channels); {
		m, err := ps.Receive(ctx)
		if err != nil {
			_ = ps.Close()
			return nil, fmt.Errorf("subscribe to %s: %w", channels[0], err)
		}
		switch m := m.(type) {
		case *redis.Subscription:
			confirmed++
		case *redis.Message:
			early = append(early, m)
		}
	}
	out := make(chan StatusEvent, 64+len(early))
	for _, m := range early {
		if e, ok := statusEvent(m); ok {
			out <- e
		}
	}
	s := &Subscription{C: out, ps: ps, done: make(chan struct{})}
	in := ps.Channel()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		for {
			select {
			case <-s.done:
				return
			case msg, ok := <-in:
				if !ok {
					return
				}
				e, ok := statusEvent(msg)
				if !ok {
					continue
				}
				select {
				case out <- e:
				case <-s.done:
					return
				}
			}
		}
	}()
	return s, nil
}

// statusEvent parses a message "<thread id> <status>".
func statusEvent(m *redis.Message) (StatusEvent, bool) {
	i := strings.LastIndexByte(m.Payload, ' ')
	if i <= 0 {
		return StatusEvent{}, false
	}
	return StatusEvent{ThreadID: m.Payload[:i], Status: m.Payload[i+1:]}, true
}

// waitProbeBatch is how many ids WaitTerminal probes in one round trip.
const waitProbeBatch = 512

// probeStatus is the status of each of ids, in one pipeline ("" for an
// id with no record).
func (r *Registry) probeStatus(ctx context.Context, ids []string) ([]thread.Status, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, r.ks.Thread(id), "status")
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own
	out := make([]thread.Status, len(ids))
	for i, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("wait for threads: %w", err)
		}
		out[i] = thread.Status(c.Val())
	}
	return out, nil
}

// Close ends the subscription and closes C.
func (s *Subscription) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ps.Close()
		s.wg.Wait()
	})
	return err
}

// WaitTerminal waits until every thread of ids has finished, following
// continuation chains: waiting on A that was continued to B and then C
// returns C's record, keyed by A. A thread has finished when the chain
// ends in a terminal status (a continued thread only when its chain cannot
// be followed further).
//
// It subscribes to status events first and then reads the registry, so no
// change is missed: a pipelined probe of every id's status, and a full
// read of those that ended (one pipeline for all the ids a burst of events
// is about); an event that a watched thread ended (a terminal
// status, continued included) re-reads the ids whose chains it is on (only those: waiting on thousands of threads costs one
// read per event, not one per id), and a slow safety poll
// (Config.SafetyPoll) re-reads every id still pending, for lost
// messages. ErrNotFound when an id is not registered. When ctx ends first
// it returns the records finished so far and ctx's error.
func (r *Registry) WaitTerminal(ctx context.Context, ids []string) (map[string]*Record, error) {
	sub, err := r.Subscribe(ctx)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	w := newTerminalWait(r, ids)
	if err := w.checkAll(ctx); err != nil {
		return w.done, err
	}
	tick := time.NewTicker(r.poll)
	defer tick.Stop()
	for len(w.pending) > 0 {
		select {
		case <-ctx.Done():
			return w.done, fmt.Errorf("wait for threads: %w", ctx.Err())
		case ev, ok := <-sub.C:
			ended, err := w.endedBy(sub, ev, ok)
			if err != nil {
				return w.done, err
			}
			if err := w.checkMany(ctx, ended); err != nil {
				return w.done, err
			}
		case <-tick.C:
			if err := w.checkAll(ctx); err != nil {
				return w.done, err
			}
		}
	}
	return w.done, nil
}

// terminalWait is one WaitTerminal: the ids finished and still pending,
// and the threads whose end may end a pending id's chain.
type terminalWait struct {
	r       *Registry
	done    map[string]*Record
	pending map[string]bool
	// affects maps a watched thread to the pending ids whose chain it is on.
	affects map[string]map[string]bool
}

func newTerminalWait(r *Registry, ids []string) *terminalWait {
	w := &terminalWait{r: r, done: make(map[string]*Record, len(ids)), pending: make(map[string]bool, len(ids)),
		affects: map[string]map[string]bool{}}
	for _, id := range ids {
		w.pending[id] = true
	}
	return w
}

// watch notes that thread t's end may end pending id's chain.
func (w *terminalWait) watch(t, id string) {
	if w.affects[t] == nil {
		w.affects[t] = map[string]bool{}
	}
	w.affects[t][id] = true
}

// settle records where id's chain was found to end.
func (w *terminalWait) settle(id string, res resolved) error {
	if res.rec == nil {
		return fmt.Errorf("wait for thread %q: %w", id, ErrNotFound)
	}
	for _, t := range []string{id, res.rec.ThreadID, res.end} {
		w.watch(t, id)
	}
	if res.rec.Status.Terminal() && !res.missing {
		w.done[id] = res.rec
		delete(w.pending, id)
	}
	return nil
}

// check walks id's chain and settles it.
func (w *terminalWait) check(ctx context.Context, id string) error {
	res, err := w.r.resolve(ctx, id)
	if err != nil {
		return err
	}
	return w.settle(id, res)
}

// checkMany reads ids' records in one round trip and settles each whose
// chain ends there; an id continued elsewhere, or with no record, is
// walked by check.
func (w *terminalWait) checkMany(ctx context.Context, ids []string) error {
	if len(ids) == 1 {
		return w.check(ctx, ids[0])
	}
	recs, err := w.r.getEach(ctx, ids)
	if err != nil {
		return err
	}
	for i, id := range ids {
		rec := recs[i]
		if rec == nil || (rec.Status == thread.StatusContinued && rec.ContinuationThreadID != "") {
			err = w.check(ctx, id)
		} else {
			err = w.settle(id, resolved{rec: rec, end: id})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkAll probes every pending id's status, waitProbeBatch ids a round
// trip, and reads in full (checkMany) only the ids whose chain may have
// ended: a terminal status (continued included) or no record.
func (w *terminalWait) checkAll(ctx context.Context) error {
	ids := make([]string, 0, len(w.pending))
	for id := range w.pending {
		ids = append(ids, id)
	}
	for len(ids) > 0 {
		batch := ids[:min(len(ids), waitProbeBatch)]
		ids = ids[len(batch):]
		status, err := w.r.probeStatus(ctx, batch)
		if err != nil {
			return err
		}
		var ended []string
		for i, id := range batch {
			if st := status[i]; st != "" && !st.Terminal() {
				w.watch(id, id) // its own end is all there is to watch
				continue
			}
			ended = append(ended, id)
		}
		if err := w.checkMany(ctx, ended); err != nil {
			return err
		}
	}
	return nil
}

// endedBy returns the pending ids that event ev (ok false: the
// subscription closed) and the events already queued behind it may have
// ended, up to waitProbeBatch of them, to be read in one round trip.
func (w *terminalWait) endedBy(sub *Subscription, ev StatusEvent, ok bool) ([]string, error) {
	var ended []string
	seen := map[string]bool{}
	for {
		if !ok {
			return nil, fmt.Errorf("wait for threads: event subscription closed")
		}
		if thread.Status(ev.Status).Terminal() { // not running, waiting, a cancel request
			for id := range w.affects[ev.ThreadID] {
				if w.pending[id] && !seen[id] {
					seen[id] = true
					ended = append(ended, id)
				}
			}
		}
		if len(ended) >= waitProbeBatch || len(sub.C) == 0 {
			return ended, nil
		}
		ev, ok = <-sub.C
	}
}
