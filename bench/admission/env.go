package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// env is one topology's Redis: a client of every master, the temporary
// directory the fleets' projects go to, and the hook counting one
// tenant's script calls.
type env struct {
	taskCheck time.Duration // the workers' TaskCheckInterval (0: the default)
	rdb       redis.UniversalClient
	dir       string
	cluster   bool
	calls     *slotCalls
	seq       int
}

// openEnv opens (or starts) the topology's Redis; stop stops what it
// started.
func openEnv(o options, topo string) (*env, func(), error) {
	url := o.redisURL
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if topo == "cluster" {
		url = o.clusterURL
		if url == "" {
			u, stopCluster, err := testenv.StartCluster()
			stops = append(stops, stopCluster)
			if err != nil {
				stop()
				return nil, nil, err
			}
			url = u
		}
	}
	rdb, dir, stopRedis, err := benchenv.Scratch("spool-bench-admission-", url)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, stopRedis)
	e := &env{rdb: rdb, dir: dir, calls: &slotCalls{}, taskCheck: o.taskCheck}
	_, e.cluster = rdb.(*redis.ClusterClient)
	if topo == "cluster" && !e.cluster {
		stop()
		return nil, nil, fmt.Errorf("%s is no Redis Cluster", url)
	}
	// Before any fleet's auto-pipeliner is made from rdb. On a Cluster the
	// pipeliner sends through each node's client, so the hook goes there
	// (and only there: a Cluster client's own hooks and its nodes' would
	// both see a command it sends itself).
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(c *redis.Client) { c.AddHook(e.calls) })
		if err := cc.ForEachShard(context.Background(), func(_ context.Context, c *redis.Client) error {
			c.AddHook(e.calls)
			return nil
		}); err != nil {
			stop()
			return nil, nil, err
		}
	} else {
		rdb.AddHook(e.calls)
	}
	return e, stop, nil
}

// fleetSpec is what a fleet runs: its directives and the scripted model.
type fleetSpec struct {
	files  map[string]string
	script string
	more   map[string]string // more scripted models: path → script
	conc   int
	policy string // admission.yaml to publish; "" leaves admission off
}

// fleet makes a fleet in a new namespace (sharded on a Cluster, as spool
// makes one there), publishes spec.policy and waits until admission sees
// it and the worker's capacity.
func (e *env) fleet(ctx context.Context, spec fleetSpec) (*benchenv.Fleet, error) {
	e.seq++
	ns := fmt.Sprintf("adm%d-%d", e.seq, time.Now().UnixNano())
	shards := 1
	if e.cluster {
		ks, err := registry.Layout(ctx, e.rdb, keyspace.New(ns), registry.DefaultClusterShards, true)
		if err != nil {
			return nil, err
		}
		shards = ks.Shards()
	}
	f, err := benchenv.NewFleet(ctx, e.rdb, blobstore.NewMemory(), benchenv.FleetConfig{
		Namespace: ns, Shards: shards, Dir: fmt.Sprintf("%s/%s", e.dir, ns), Concurrency: spec.conc,
		Files: spec.files, ScriptPath: "scripts/bench.yaml", Script: spec.script, MoreScripts: spec.more, TaskCheckInterval: e.taskCheck,
	})
	if err != nil {
		return nil, err
	}
	if spec.policy == "" {
		return f, nil
	}
	if err := publish(ctx, e.rdb, f.O, spec.policy, spec.conc); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// publish publishes policy (admission.yaml) in o's namespace, has o's
// admission read it at once and waits until the worker registry counts
// the worker's conc slots (a provisional share is taken from it).
func publish(ctx context.Context, rdb redis.UniversalClient, o *orchestrator.Orchestrator, policy string, conc int) error {
	pol, err := parsePolicy(policy)
	if err != nil {
		return err
	}
	adm := o.Admission()
	if _, _, err := admission.Publish(ctx, rdb, adm.Keys(), pol, "bench", time.Now()); err != nil {
		return err
	}
	if err := adm.Watcher().Refresh(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := admission.Capacity(ctx, rdb, adm.Keys(), time.Now())
		if err == nil && c >= conc {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the worker registry counts %d slots after 15s, want %d (%w)", c, conc, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parsePolicy parses an admission.yaml.
func parsePolicy(policy string) (*admission.Policy, error) {
	return admission.Parse("admission.yaml", []byte(policy))
}

// start is one start of a round: its tenant, priority and idempotency
// key ("" for none).
type start struct {
	tenant, key string
	priority    int
	model       string // "": the fleet's
}

// startAll starts directive once per entry of starts from producers
// goroutines and returns the ids, in order.
func startAll(ctx context.Context, f *benchenv.Fleet, directive string, starts []start, producers int) ([]string, error) {
	ids := make([]string, len(starts))
	err := benchenv.Produce(len(starts), producers, func(i int) error {
		s := starts[i]
		rec, err := f.O.Start(ctx, orchestrator.StartRequest{Directive: directive, Bundle: f.Bundle, Model: cmp.Or(s.model, f.Model),
			Tenant: s.tenant, Priority: s.priority, IdempotencyKey: s.key})
		if err != nil {
			return err
		}
		ids[i] = rec.ThreadID
		return nil
	})
	return ids, err
}

// spans waits for every run of ids to end (within timeout), requires each
// completed, and returns them as spans, in order, with the tenant of
// each start.
func spans(ctx context.Context, f *benchenv.Fleet, ids []string, starts []start, timeout time.Duration) ([]span, error) {
	res, err := f.O.Wait(ctx, ids, timeout)
	if err != nil {
		return nil, err
	}
	out := make([]span, len(ids))
	for i, id := range ids {
		rec := res[id]
		if rec == nil || rec.Status != thread.StatusCompleted {
			return nil, fmt.Errorf("thread %s did not complete: %+v", id, rec)
		}
		out[i] = span{Tenant: starts[i].tenant, Created: rec.CreatedAt, Started: rec.StartedAt, Ended: rec.UpdatedAt}
	}
	return out, nil
}

// masters runs fn on every master (the one server off Cluster).
func (e *env) masters(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error {
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	if c, ok := e.rdb.(*redis.Client); ok {
		return fn(ctx, c)
	}
	return fmt.Errorf("a %T is neither a client nor a Cluster client", e.rdb)
}

// redisSample is the CPU Redis used so far, and since the last reset the
// time its scripts took (FCALL, EVALSHA, EVAL: the commands they run
// included) and every command's stats, summed over the masters.
type redisSample struct {
	cpu, scripts time.Duration
	stats        map[string]benchenv.CommandStat // per command, summed over the masters
}

func (e *env) sample(ctx context.Context) (redisSample, error) {
	var mu sync.Mutex
	s := redisSample{stats: map[string]benchenv.CommandStat{}}
	err := e.masters(ctx, func(ctx context.Context, c *redis.Client) error {
		cpu := benchenv.SampleCPU(ctx, c).Redis
		stats := benchenv.CommandStats(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		s.cpu += cpu
		for _, st := range stats {
			if isScript(st.Name) {
				s.scripts += time.Duration(st.Usec) * time.Microsecond
			}
			sum := s.stats[st.Name]
			sum.Name, sum.Calls, sum.Usec = st.Name, sum.Calls+st.Calls, sum.Usec+st.Usec
			s.stats[st.Name] = sum
		}
		return nil
	})
	return s, err
}

// idleCPU is the CPU Redis uses in d with nothing running (its cron, on
// a Cluster the cluster bus), summed over the masters.
func (e *env) idleCPU(ctx context.Context, d time.Duration) (time.Duration, error) {
	s0, err := e.sample(ctx)
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	s1, err := e.sample(ctx)
	if err != nil {
		return 0, err
	}
	return s1.cpu - s0.cpu, nil
}

// isScript reports whether command name (as INFO commandstats names it)
// runs a script.
func isScript(name string) bool {
	switch name {
	case "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro":
		return true
	}
	return false
}

// resetStats resets every master's INFO commandstats.
func (e *env) resetStats(ctx context.Context) error {
	return e.masters(ctx, func(ctx context.Context, c *redis.Client) error { return c.ConfigResetStat(ctx).Err() })
}

// slotCalls is a client hook counting the script calls (FCALL, EVALSHA)
// whose first key is in one tenant's slot: on a Cluster, the calls that
// tenant's node serializes for it.
type slotCalls struct {
	prefix atomic.Pointer[string]
	n      atomic.Int64
}

// watch counts, from now, the calls of tenant's slot in ks, from zero.
func (c *slotCalls) watch(ks keyspace.Space, tenant string) {
	p := ks.TenantPrefix(tenant)
	c.prefix.Store(&p)
	c.n.Store(0)
}

func (c *slotCalls) count(cmd redis.Cmder) {
	p := c.prefix.Load()
	if p == nil {
		return
	}
	args := cmd.Args()
	if len(args) < 4 {
		return
	}
	if name, _ := args[0].(string); !strings.EqualFold(name, "fcall") && !strings.EqualFold(name, "evalsha") {
		return
	}
	if key, _ := args[3].(string); strings.HasPrefix(key, *p) {
		c.n.Add(1)
	}
}

// DialHook is redis.Hook's.
func (c *slotCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's: it only reads the command.
func (c *slotCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook is redis.Hook's.
func (c *slotCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
