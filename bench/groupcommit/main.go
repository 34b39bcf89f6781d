// Command groupcommit measures what Redis spends per checkpoint when a
// worker commits its threads' checkpoints one call each, as spool does,
// against several threads' checkpoints in one call (a group commit), the
// lever BENCHMARKS.md weighs for Redis CPU per turn (issue 20).
//
// Each checkpoint is what spool_checkpoint runs for a turn: registry.commit
// on a thread's record (a hash of a real record's size) and ledger.charge on
// its chain's entry, the same Lua (registry.lua, ledger.lua) loaded as one
// Redis Function whose body loops over the threads it is given. Modes, each
// run -rounds times over -threads threads from -clients goroutines and
// alternated -reps times:
//
//	single        one FCALL per checkpoint, a pooled connection per caller
//	single+pipe   one FCALL per checkpoint through the auto-pipeliner
//	              spool's scripts use (internal/autopipe): today's path
//	group N       N checkpoints per FCALL through the auto-pipeliner
//
// It prints the median Redis CPU (INFO cpu, user + system) per checkpoint
// of each mode:
//
//	go run ./bench/groupcommit -threads 2000 -rounds 10 -reps 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
)

// body commits and charges the threads of KEYS/ARGV, four keys and five
// arguments each: thread hash, active set, events channel, ledger entry;
// id, charge key, amount (nano-USD), now, cost (JSON). It replies each
// thread's new version, or its refusal as a string.
const body = `
local out = {}
for i = 0, #KEYS / 4 - 1 do
  local k, a = 4 * i, 5 * i
  local c = registry.commit({KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]},
    {ARGV[a + 1], '0', '', ARGV[a + 4], '', '', 'cost', ARGV[a + 5]})
  if c.err then
    out[i + 1] = c.err
  else
    local ch = ledger.charge({KEYS[k + 4]}, {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], 'add'})
    if ch.err then out[i + 1] = ch.err else out[i + 1] = c[1] end
  end
end
return out`

func main() {
	threads := flag.Int("threads", 2000, "threads, each with a record and a ledger entry")
	rounds := flag.Int("rounds", 10, "checkpoints per thread and mode")
	clients := flag.Int("clients", 32, "goroutines committing")
	reps := flag.Int("reps", 3, "alternations of the modes")
	groups := flag.String("groups", "8,32", "checkpoints per call of the group modes")
	redisURL := benchenv.RedisFlag()
	flag.Parse()
	if err := run(*threads, *rounds, *clients, *reps, *groups, *redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "groupcommit:", err)
		os.Exit(1)
	}
}

type mode struct {
	name  string
	group int
	pipe  bool
}

func run(threads, rounds, clients, reps int, groups, url string) error {
	ctx := context.Background()
	rdb, _, stop, err := benchenv.Scratch("spool-groupcommit-*", url)
	if err != nil {
		return err
	}
	defer stop()
	modes := []mode{{"single", 1, false}, {"single+pipe", 1, true}}
	for _, g := range strings.Split(groups, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil || n < 2 {
			return fmt.Errorf("-groups: %q is not a number above 1", g)
		}
		modes = append(modes, mode{fmt.Sprintf("group %d", n), n, true})
	}
	prefix := fmt.Sprintf("bench-gc-%d", time.Now().UnixNano())
	if err := populate(ctx, rdb, prefix, threads); err != nil {
		return err
	}
	script := redisfn.New("bench_group_commit", registry.Lua+"\n"+ledger.Lua, body)
	plain, pipe := redisfn.NewClient(rdb), redisfn.NewClient(autopipe.Wrap(rdb))
	per := map[string][]float64{}
	for r := 0; r < reps; r++ {
		for _, m := range modes {
			c := plain
			if m.pipe {
				c = pipe
			}
			us, err := measure(ctx, rdb, c, script, prefix, m.group, threads, rounds, clients)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			per[m.name] = append(per[m.name], us)
		}
	}
	info := benchenv.Info(ctx, rdb, "server")
	fmt.Printf("groupcommit: %d threads x %d checkpoints a mode, %d clients, %d alternations, redis %s\n",
		threads, rounds, clients, reps, info["redis_version"])
	base := benchenv.Median(per["single+pipe"])
	for _, m := range modes {
		med := benchenv.Median(per[m.name])
		fmt.Printf("  %-12s %6.1f µs Redis CPU per checkpoint (median; %s), %.2f of single+pipe\n",
			m.name, med, list(per[m.name]), med/base)
	}
	return nil
}

// populate writes each thread's record (34 fields, as a finished thread
// of bench/fleet has) and its root ledger entry.
func populate(ctx context.Context, rdb redis.UniversalClient, prefix string, threads int) error {
	pipe := rdb.Pipeline()
	for i := 0; i < threads; i++ {
		id := fmt.Sprintf("bench/work-%08d", i)
		rec := []any{"thread_id", id, "status", "running", "version", 1, "transcript_segments", 0,
			"directive", "bench/work", "model", "script:scripts/fleet.yaml", "queue", "default",
			"bundle", strings.Repeat("9a", 32), "transcript_chain_hash", strings.Repeat("03", 32),
			"limits", `{"turns":5,"tokens":4096,"spend":1,"depth":10,"spawns":10,"duration":300}`,
			"capabilities", `["rye.execute.tool.rye.file-system.*"]`, "trace_parent", "00-" + strings.Repeat("9c", 16) + "-" + strings.Repeat("64", 8) + "-01",
			"created_at", time.Now().UTC().Format(time.RFC3339Nano), "started_at", time.Now().UTC().Format(time.RFC3339Nano),
			"updated_at", time.Now().UTC().Format(time.RFC3339Nano), "chain_root_id", id, "active_task", id,
			"ancestors", "[]", "depth", 0, "activation", 1, "chain_index", 0, "inputs", "{}", "outputs", "{}",
			"parent_id", "", "previous_thread_id", "", "continuation_of", "", "continuation_thread_id", "",
			"continuation_kind", "", "continuation_message", "", "waiting_for", "", "result", "", "trace_caller", "",
			"model_override", "script:scripts/fleet.yaml"}
		pipe.HSet(ctx, key(prefix, "thread", id), rec...)
		pipe.HSet(ctx, key(prefix, "ledger", id), "parent_id", "", "max", 1_000_000_000_000, "reserved", 0,
			"actual", 0, "own", 0, "overrun", 0, "status", "active", "g", 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

func key(prefix, kind, id string) string { return "spool:{" + prefix + "}:" + kind + ":" + id }

// checkpointCost is the cost every checkpoint commits: one turn's.
const checkpointCost = `{"turns":1,"input_tokens":100,"output_tokens":10,"spend":0.00015,"elapsed_seconds":0.001367574}`

// measure runs rounds checkpoints of every thread, group of them a call,
// and returns Redis's CPU per checkpoint in µs.
func measure(ctx context.Context, info redis.UniversalClient, c *redisfn.Client, script *redisfn.Script, prefix string,
	group, threads, rounds, clients int) (float64, error) {
	gc := &groupCommit{c: c, script: script, prefix: prefix, group: group, threads: threads}
	before := benchenv.SampleCPU(ctx, info)
	work := make(chan [2]int)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range work {
				if err := gc.commit(ctx, job[0], job[1]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	n, err := feed(work, errs, group, threads, rounds)
	close(work)
	wg.Wait()
	if err != nil {
		return 0, err
	}
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	d := benchenv.SampleCPU(ctx, info).Sub(before)
	return float64(d.Redis.Microseconds()) / float64(n), nil
}

// feed hands the committers every round's groups of threads on work, as
// {round, first thread}, and returns how many checkpoints it handed out.
// It stops at a committer's error: the error it took from errs, or none
// when it saw one waiting there (the caller takes it).
func feed(work chan<- [2]int, errs chan error, group, threads, rounds int) (int, error) {
	n := 0
	for round := 0; round < rounds; round++ {
		for first := 0; first < threads; first += group {
			select {
			case work <- [2]int{round, first}:
			case err := <-errs:
				return n, err
			}
			n += min(group, threads-first)
			if len(errs) > 0 {
				return n, nil
			}
		}
	}
	return n, nil
}

// groupCommit is one mode's checkpoints: group threads' checkpoints a call
// of script through c, on the threads populate wrote under prefix.
type groupCommit struct {
	c              *redisfn.Client
	script         *redisfn.Script
	prefix         string
	group, threads int
}

// commit runs round's checkpoint of the group of threads from first on
// (fewer at the end) in one call; a thread's refusal fails it.
func (g *groupCommit) commit(ctx context.Context, round, first int) error {
	var keys []string
	var args []any
	for i := first; i < first+g.group && i < g.threads; i++ {
		id := fmt.Sprintf("bench/work-%08d", i)
		keys = append(keys, key(g.prefix, "thread", id), key(g.prefix, "x", "active"), key(g.prefix, "x", "events"), key(g.prefix, "ledger", id))
		args = append(args, id, fmt.Sprintf("%s:turn:%d", id, round), 150000, time.Now().UTC().Format(time.RFC3339Nano), checkpointCost)
	}
	res, err := g.script.Run(ctx, g.c, keys, args...).Slice()
	if err != nil {
		return err
	}
	for _, r := range res {
		if s, ok := r.(string); ok {
			err = fmt.Errorf("refused: %s", s)
		}
	}
	return err
}

func list(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, ", ")
}
