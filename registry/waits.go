package registry

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/thread"
)

// WakeNowError is returned by Suspend with suspended true when a chain of
// another tree finished while the thread suspended, and this call found
// it the last one: the caller enqueues Wake (housekeeping does it, should
// the caller die first: StalledWaits).
type WakeNowError struct{ Wake Wake }

func (e *WakeNowError) Error() string {
	return "thread " + e.Wake.ThreadID + " suspended and is to be woken at once"
}

// ErrChainMoved is returned by Suspend when a thread it was told to wait on
// has just been continued: the caller resolves the chains again and retries.
var ErrChainMoved = errors.New("continuation chain moved")

// WaitTarget is one thing a thread waits for: the continuation chain rooted
// at Root, whose current terminal thread is Terminal.
type WaitTarget struct {
	Root     string
	Terminal string
}

// suspendScript suspends a running thread until every target chain has
// finished (mode all), or until any one has (mode any: a graph run's
// sliding window of children, a wait node of mode any) (suspend.lua).
var suspendScript = redisfn.New("suspend", "", suspendLua)

//go:embed suspend.lua
var suspendLua string

// Suspend moves a running thread (holding version) to waiting until every
// target chain has a finished terminal thread. It returns suspended=false
// when all targets are already finished (the thread goes on running at the
// same version), or the suspension sequence number that the wake-up must
// present to Claim. ErrChainMoved: re-resolve the targets and call again.
//
// In a sharded key space a target of another tree's shard (a wait across
// trees) cannot be in the script: it is watched first (the waiter joins
// its waiters set, and its status is read, watchScript), and read again
// after the suspension; a chain that finished in between is told here
// (NotifyWaiters), so its wake-up is not lost, and at most one of the
// two tells wakes the waiter.
func (a *Activations) Suspend(ctx context.Context, id string, version int64, targets []WaitTarget) (suspended bool, seq int64, err error) {
	return a.suspend(ctx, id, version, targets, false)
}

// SuspendAny is Suspend until any one target chain has finished: it
// returns suspended=false when one has already. A graph run keeps a
// window of children running this way, woken as each one ends.
func (a *Activations) SuspendAny(ctx context.Context, id string, version int64, targets []WaitTarget) (suspended bool, seq int64, err error) {
	return a.suspend(ctx, id, version, targets, true)
}

// suspend is Suspend (anyOf false) and SuspendAny (anyOf true): the
// targets of another shard are watched first, the suspension is one
// script, and the watched chains are read again once it held.
func (a *Activations) suspend(ctx context.Context, id string, version int64, targets []WaitTarget, anyOf bool) (suspended bool, seq int64, err error) {
	mode := "all"
	if anyOf {
		mode = "any"
	}
	keys := []string{a.ks.Thread(id), a.ks.Waits(id), a.ks.Events(id)}
	args := []any{version, a.now().UTC().Format(time.RFC3339Nano), id, mode}
	keys, args, foreign := a.shardTargets(id, targets, keys, args)
	watched, args, finished, err := a.watchForeign(ctx, id, version, foreign, args, anyOf)
	if err != nil {
		return false, 0, err
	}
	if finished {
		return false, version, nil // one has finished: nothing to wait for
	}
	res, err := suspendScript.Run(ctx, a.rdb, keys, args...).Int64Slice()
	if err != nil {
		return false, 0, scriptError("suspend "+id, id, version, err)
	}
	if len(res) != 2 {
		return false, 0, reply.Unexpected("suspend", res)
	}
	if res[0] == 1 {
		if err := a.wakeFinished(ctx, id, watched); err != nil {
			return true, res[1], err
		}
	}
	return res[0] == 1, res[1], nil
}

// shardTargets appends to the suspend script's keys and args those of
// the targets in id's shard (the terminal thread and the waiters set,
// and the root), and returns the others, foreign, to be watched.
func (a *Activations) shardTargets(id string, targets []WaitTarget, keys []string, args []any) ([]string, []any, []WaitTarget) {
	var foreign []WaitTarget
	for _, t := range targets {
		if a.ks.ShardOf(t.Root) != a.ks.ShardOf(id) || a.ks.ShardOf(t.Terminal) != a.ks.ShardOf(id) {
			foreign = append(foreign, t)
			continue
		}
		keys = append(keys, a.ks.Thread(t.Terminal), a.ks.Waiters(t.Root))
		args = append(args, t.Root)
	}
	return keys, args, foreign
}

// watchForeign joins id to the waiters of each foreign chain, one script
// each, and returns those still pending, watched, with their roots
// appended to args. With anyOf it stops at the first one that has
// finished, with finished true: there is nothing to wait for.
func (a *Activations) watchForeign(ctx context.Context, id string, version int64, foreign []WaitTarget, args []any, anyOf bool) (watched []WaitTarget, _ []any, finished bool, err error) {
	for _, t := range foreign {
		pending, err := watchScript.Run(ctx, a.rdb, []string{a.ks.Thread(t.Terminal), a.ks.Waiters(t.Root)}, id, t.Root).Int64()
		if err != nil {
			return nil, nil, false, scriptError("suspend "+id, id, version, err)
		}
		if pending == 1 {
			watched = append(watched, t)
			args = append(args, t.Root)
		} else if anyOf {
			return nil, nil, true, nil
		}
	}
	return watched, args, false, nil
}

// wakeFinished reads again, once id's suspension held, the status of each
// watched chain's terminal thread: one that finished in between may not
// have seen id waiting, so its waiters are told here, and when that wakes
// id the error is a *WakeNowError.
func (a *Activations) wakeFinished(ctx context.Context, id string, watched []WaitTarget) error {
	for _, t := range watched {
		st, err := a.rdb.HGet(ctx, a.ks.Thread(t.Terminal), "status").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("suspend %s: %w", id, err)
		}
		if s := thread.Status(st); !s.Terminal() || s == thread.StatusContinued {
			continue
		}
		// Finished before the suspension held: its finalize may not
		// have seen the waiter waiting.
		wakes, err := a.NotifyWaiters(ctx, t.Root, []string{id})
		if err != nil {
			return err
		}
		if len(wakes) == 1 {
			return &WakeNowError{Wake: wakes[0]}
		}
	}
	return nil
}

// watchScript joins a waiter to a chain of another shard's tree and reads
// its terminal thread (Suspend) (watch.lua).
var watchScript = redisfn.New("watch", "", watchLua)

//go:embed watch.lua
var watchLua string

// notifyScript tells the waiters of a finished chain, those of one shard
// (notify.lua).
var notifyScript = redisfn.New("notify", "", notifyLua)

//go:embed notify.lua
var notifyLua string

// Wake is a waiting thread to re-enqueue with reason "wake" and Seq.
type Wake struct {
	ThreadID string
	Seq      int64
}

// NotifyFinished is called once a chain's terminal thread has reached a
// final status other than continued. It removes the chain from every
// waiter's waits set and returns the waiters it was the last chain for;
// each is returned exactly once, however many chains finish at the same
// moment.
func (a *Activations) NotifyFinished(ctx context.Context, chainRoot string) ([]Wake, error) {
	waiters, err := a.rdb.SMembers(ctx, a.ks.Waiters(chainRoot)).Result()
	if err != nil {
		return nil, err
	}
	return a.NotifyWaiters(ctx, chainRoot, waiters)
}

// NotifyWaiters is NotifyFinished in two parts: its second, for the
// waiters of the chain that the first read. Package orchestrator's
// finalize.lua reads them in the script that finishes the chain (most
// chains have no waiter, and then the second part is nothing).
func (a *Activations) NotifyWaiters(ctx context.Context, chainRoot string, waiters []string) ([]Wake, error) {
	if len(waiters) == 0 {
		return nil, nil
	}
	// One script per shard of waiters (in a one-slot space, one). A
	// waiter of another tree's shard (a wait across trees) is told first
	// and leaves the chain's waiters set after: a crash between leaves it
	// there, and telling it again wakes nothing twice.
	byShard := map[int][]string{}
	for _, w := range waiters {
		sh := a.ks.ShardOf(w)
		byShard[sh] = append(byShard[sh], w)
	}
	var out []Wake
	for sh, ws := range byShard {
		var keys []string
		args := []any{chainRoot}
		for _, w := range ws {
			keys = append(keys, a.ks.Waits(w), a.ks.Thread(w))
			args = append(args, w)
		}
		here := sh == a.ks.ShardOf(chainRoot)
		if here {
			keys = append(keys, a.ks.Waiters(chainRoot))
		}
		res, err := notifyScript.Run(ctx, a.rdb, keys, args...).StringSlice()
		if err != nil && !errors.Is(err, redis.Nil) {
			return out, fmt.Errorf("notify waiters of %s: %w", chainRoot, err)
		}
		for i := 0; i+1 < len(res); i += 2 {
			var seq int64
			_, _ = fmt.Sscan(res[i+1], &seq)
			out = append(out, Wake{ThreadID: res[i], Seq: seq})
		}
		if !here {
			if err := a.rdb.SRem(ctx, a.ks.Waiters(chainRoot), args[1:]...).Err(); err != nil {
				return out, fmt.Errorf("notify waiters of %s: %w", chainRoot, err)
			}
		}
	}
	return out, nil
}

// StalledWaits lists waiting threads whose waits set is empty: every chain
// they waited for has finished, but the process that should have woken them
// died first; and threads waiting for approval whose every call has been
// decided (the decision's wake-up was lost). Housekeeping re-enqueues them
// (the task id makes it once). A thread whose wake-up admission parked
// (Park) is ParkedThreads', not listed here.
//
// A chain that finished without telling its waiters (its finisher died
// between the end's commit and NotifyWaiters, or Redis failed over with
// the end and without the telling) is still in their waits sets, and no
// one else will tell them: each waiter's chains are read here, and those
// that have ended are told now (NotifyWaiters, which wakes nothing
// twice should their finisher tell them too), so a waiter they were the
// last chains of is listed.
func (a *Activations) StalledWaits(ctx context.Context) ([]Wake, error) {
	ids, err := members(ctx, a.rdb, a.ks.AllActive())
	if err != nil {
		return nil, err
	}
	var out []Wake
	for _, id := range ids {
		w, err := a.stalledWait(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, w...)
	}
	return out, nil
}

// stalledWait is StalledWaits for thread id: its wake-up when it is due
// and was lost, none otherwise.
func (a *Activations) stalledWait(ctx context.Context, id string) ([]Wake, error) {
	pipe := a.rdb.Pipeline()
	h := pipe.HMGet(ctx, a.ks.Thread(id), "status", "suspend_seq", "waiting_for", "approvals_open", "wake_at", "wake_any", "wait_n", AdmActField)
	m := pipe.SMembers(ctx, a.ks.Waits(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	vals, waits := h.Val(), m.Val()
	if len(vals) < 8 || vals[0] != "waiting" {
		return nil, nil
	}
	lost := a.wakeLost(vals, int64(len(waits)))
	if vals[2] == WaitingForMessage {
		var err error
		if lost, err = a.messageWakeLost(ctx, id, fmt.Sprint(vals[4])); err != nil {
			return nil, err
		}
	}
	if !lost {
		if vals[2] != WaitingForChildren || len(waits) == 0 {
			return nil, nil
		}
		return a.tellEnded(ctx, id, waits)
	}
	if act, _ := vals[7].(string); act != "" {
		return nil, nil // woken, and parked by admission: ParkedThreads
	}
	var seq int64
	_, _ = fmt.Sscan(fmt.Sprint(vals[1]), &seq)
	return []Wake{{ThreadID: id, Seq: seq}}, nil
}

// tellEnded tells waiter id of each chain among roots (its waits set)
// that has ended without telling it, and returns its wake-up when they
// were the last it waited for (NotifyWaiters). The chains' first threads
// are read in one round trip; a continued one is followed to where its
// chain has reached (chainEnded).
func (a *Activations) tellEnded(ctx context.Context, id string, roots []string) ([]Wake, error) {
	pipe := a.rdb.Pipeline()
	heads := make([]*redis.SliceCmd, len(roots))
	for i, root := range roots {
		heads[i] = pipe.HMGet(ctx, a.ks.Thread(root), "status", "continuation_thread_id")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("chains waited on by %s: %w", id, err)
	}
	var out []Wake
	for i, root := range roots {
		ended, next := threadEnded(heads[i].Val())
		if next != "" {
			var err error
			if ended, err = a.chainEnded(ctx, root, next); err != nil {
				return nil, err
			}
		}
		if !ended {
			continue
		}
		wakes, err := a.NotifyWaiters(ctx, root, []string{id})
		if err != nil {
			return nil, err
		}
		out = append(out, wakes...)
	}
	return out, nil
}

// threadEnded reads a thread's status and continuation_thread_id (vals):
// ended when its status is final other than continued; next, the thread
// to follow, when it was continued. A thread whose record is missing
// (Redis lost it) has not ended: restoring it from the store is
// reconciliation's, and tells its waiters (Restore).
func threadEnded(vals []any) (ended bool, next string) {
	st, _ := vals[0].(string)
	if thread.Status(st) == thread.StatusContinued {
		next, _ = vals[1].(string)
		return false, next
	}
	return st != "" && thread.Status(st).Terminal(), ""
}

// chainEnded reports whether the chain rooted at root, continued into
// cur, has ended: the thread it has reached (following
// continuation_thread_id, as ResolveChain does) has (threadEnded).
func (a *Activations) chainEnded(ctx context.Context, root, cur string) (bool, error) {
	seen := map[string]bool{root: true}
	for !seen[cur] {
		seen[cur] = true
		vals, err := a.rdb.HMGet(ctx, a.ks.Thread(cur), "status", "continuation_thread_id").Result()
		if err != nil {
			return false, fmt.Errorf("chain of %s: %w", root, err)
		}
		ended, next := threadEnded(vals)
		if next == "" {
			return ended, nil
		}
		cur = next
	}
	return false, nil
}

// messageWakeLost reports whether graph run id, waiting for a message,
// should have been woken already: a message of the name it waits for
// has come, or its wait's timeout (wakeAt, "" for none) has passed.
func (a *Activations) messageWakeLost(ctx context.Context, id, wakeAt string) (bool, error) {
	if at, err := time.Parse(time.RFC3339Nano, wakeAt); err == nil && !a.now().Before(at.Add(retryGrace)) {
		return true, nil
	}
	h, err := a.rdb.HMGet(ctx, a.ks.Thread(id), "message_name", "message_after").Result()
	if err != nil {
		return false, fmt.Errorf("the message %s waits for: %w", id, err)
	}
	name, _ := h[0].(string)
	var after int64
	_, _ = fmt.Sscan(fmt.Sprint(h[1]), &after)
	raw, err := a.rdb.LRange(ctx, a.ks.Messages(id), 0, -1).Result()
	if err != nil {
		return false, fmt.Errorf("messages of %s: %w", id, err)
	}
	for _, s := range raw {
		var m GraphMessage
		if json.Unmarshal([]byte(s), &m) == nil && m.Name == name && m.Seq > after {
			return true, nil
		}
	}
	return false, nil
}

// wakeLost reports whether a waiting thread, by vals (the fields
// StalledWaits reads: status, suspend_seq, waiting_for, approvals_open,
// wake_at, wake_any, wait_n) and waits (its waits set's size), should
// have been woken already: the chains it waited for have finished, no
// call is left to decide, and a retry's, rate limit's or sleep's wake_at
// is past.
func (a *Activations) wakeLost(vals []any, waits int64) bool {
	if vals[2] == WaitingForUnpause {
		return true // paused at a boundary, unpaused: it goes on at once
	}
	// An any waiter is due once one of its chains has left its
	// waits set; every other waiter once all have.
	due := waits == 0
	if mode := fmt.Sprint(vals[5]); (mode == "1" || mode == "woken") && vals[2] == WaitingForChildren {
		var n int64
		_, _ = fmt.Sscan(fmt.Sprint(vals[6]), &n)
		due = waits < n
	}
	if !due {
		return false
	}
	if vals[2] == WaitingForApproval && fmt.Sprint(vals[3]) != "0" {
		return false // people have calls left to decide
	}
	if vals[2] == WaitingForRateLimit || vals[2] == WaitingForRetry || vals[2] == WaitingForSleep {
		if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(vals[4])); err == nil && a.now().Before(at.Add(retryGrace)) {
			return false // its activation is due at wake_at
		}
	}
	return true
}
