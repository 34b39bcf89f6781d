package scheduler_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
)

func everySecond(queue string) string {
	return fmt.Sprintf("schedules:\n  - {id: every-second, directive: sched/tick, cron: '@every 1s', queue: %s, inputs: {who: cron}, limits: {turns: 2}}\n", queue)
}

// Many Fire calls for the same ticks, from two schedulers with their own
// Redis clients, racing: one thread per tick, with the tick's id.
func TestFireRacingOneThreadPerTick(t *testing.T) {
	t.Parallel()
	e := setup(t)
	entries := e.entries(everySecond(e.queue))
	a := e.scheduler(scheduler.Config{Entries: entries}, e.orch(nil))
	oB := e.orch(nil)
	b := e.scheduler(scheduler.Config{Entries: entries}, oB)
	ctx := context.Background()

	base := scheduler.Every(time.Second).Next(time.Now())
	const ticks = 6
	var mu sync.Mutex
	outcomes := map[time.Time][]string{}
	var wg sync.WaitGroup
	for i := range ticks {
		tick := base.Add(time.Duration(i) * time.Second)
		for _, s := range []*scheduler.Scheduler{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Fire(ctx, "every-second", tick)
				if err != nil {
					t.Errorf("fire %s: %v", tick, err)
					return
				}
				mu.Lock()
				outcomes[tick] = append(outcomes[tick], res.Outcome)
				mu.Unlock()
				if res.Outcome == scheduler.OutcomeStarted {
					require.Equal(t, scheduler.TickThreadID("sched/tick", "every-second", tick), res.ThreadID)
				}
			}()
		}
	}
	wg.Wait()
	require.Len(t, outcomes, ticks)
	for tick, got := range outcomes {
		sort.Strings(got)
		require.Equal(t, []string{"started", "taken", "taken", "taken"}, got, "tick %s", tick)
	}
	recs := e.threads(oB, "sched/tick")
	require.Len(t, recs, ticks)
	for _, r := range recs {
		require.Equal(t, thread.StatusCreated, r.Status)
		require.Equal(t, e.queue, r.Queue)
		require.Equal(t, "cron", r.Inputs["who"])
		require.Equal(t, 2, r.Limits.Turns, "limits from the entry")
		require.Equal(t, "script:scripts/s.yaml", r.Model)
	}

	// A tick whose lock is gone (a Redis failover) is still not run twice:
	// its thread id is taken.
	require.NoError(t, e.redis.Client.Del(ctx, scheduler.TickLockKey(oB.Runtime().Services().Keys, "every-second", base)).Err())
	res, err := b.Fire(ctx, "every-second", base)
	require.NoError(t, err)
	require.Equal(t, scheduler.OutcomeTaken, res.Outcome)
	require.Len(t, e.threads(oB, "sched/tick"), ticks)

	_, err = a.Fire(ctx, "nope", base)
	require.ErrorContains(t, err, `schedule "nope": no such entry`)
}

// Two schedulers running their tick loops on an @every 1s entry for a few
// seconds: the registry holds exactly one thread per distinct tick.
func TestTwoSchedulersOneThreadPerTick(t *testing.T) {
	t.Parallel()
	e := setup(t)
	entries := e.entries(everySecond(e.queue))
	var mu sync.Mutex
	byTick := map[time.Time][]string{}
	onTick := func(r scheduler.TickResult) {
		mu.Lock()
		defer mu.Unlock()
		byTick[r.Tick] = append(byTick[r.Tick], r.Outcome)
	}
	o := e.orch(nil)
	a := e.scheduler(scheduler.Config{Entries: entries, OnTick: onTick, HousekeepingInterval: -1}, o)
	b := e.scheduler(scheduler.Config{Entries: entries, OnTick: onTick, HousekeepingInterval: -1}, e.orch(nil))
	require.NoError(t, a.Check(context.Background()))
	require.NoError(t, a.Start())
	require.NoError(t, b.Start())
	require.Error(t, a.Start(), "twice")
	// Until both processes have acted on at least 4 ticks.
	waitFor(t, 60*time.Second, "4 ticks seen by both schedulers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, got := range byTick {
			if len(got) == 2 {
				n++
			}
		}
		return n >= 4
	})
	a.Stop()
	b.Stop()

	mu.Lock()
	defer mu.Unlock()
	ticks, contended := 0, 0
	for tick, got := range byTick {
		started := 0
		for _, o := range got {
			require.NotEqual(t, scheduler.OutcomeError, o, "tick %s", tick)
			if o == scheduler.OutcomeStarted {
				started++
			}
		}
		if started == 0 {
			continue // missed by both (a stalled machine); no thread is right
		}
		ticks++
		require.Equal(t, 1, started, "tick %s: %v", tick, got)
		if len(got) == 2 {
			contended++
		}
	}
	require.GreaterOrEqual(t, contended, 4)
	recs := e.threads(o, "sched/tick")
	require.Len(t, recs, ticks, "one thread per distinct tick")
	for _, r := range recs {
		var found bool
		for tick := range byTick {
			found = found || r.ThreadID == scheduler.TickThreadID("sched/tick", "every-second", tick)
		}
		require.True(t, found, "thread %s is not a tick's", r.ThreadID)
	}
	st := a.Entries()
	require.Len(t, st, 1)
	require.Equal(t, "every-second", st[0].ID)
	require.False(t, st[0].LastTick.IsZero())
}

func TestCheck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	for _, tt := range []struct{ yaml, want string }{
		{"- {id: ok, directive: sched/tick, cron: '@daily', inputs: {who: x}}", ""},
		{"- {id: lost, directive: sched/nope, cron: '@daily'}", `schedule "lost": directive sched/nope`},
		{"- {id: noinput, directive: sched/tick, cron: '@daily'}", `input "who"`},
		{"- {id: badscript, directive: sched/tick, cron: '@daily', inputs: {who: x}, model: 'script:missing.yaml'}", `schedule "badscript": bundle the project: model script:missing.yaml`},
	} {
		s := e.scheduler(scheduler.Config{Entries: e.entries(tt.yaml)}, o)
		err := s.Check(ctx)
		if tt.want == "" {
			require.NoError(t, err)
		} else {
			require.ErrorContains(t, err, tt.want)
		}
	}
	// Entries not made by Parse are refused.
	_, err := scheduler.New(scheduler.Config{Redis: o.Runtime().Services().Redis, Entries: []scheduler.Entry{{ID: "x", Directive: "a", Cron: "@daily"}},
		Project: e.project}, o)
	require.ErrorContains(t, err, "not made by Parse")
}
