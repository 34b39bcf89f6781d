package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptLog attributes Redis's time to spool's and asynq's scripts: with
// every command in Redis's SLOWLOG (slowlog-log-slower-than 0), it reads
// the log while the fleet runs and sums each top-level command, a script
// by its SHA, with the commands the script ran (Redis logs those too,
// just before the script's own entry, in upper case as the scripts write
// them). Durations are wall time inside Redis: on a busy machine a
// preempted call shows as a long one, so the median per call is the
// figure to trust, and Redis's CPU per turn rises by the logging itself.
type scriptLog struct {
	rdb     redis.UniversalClient
	lastID  int64
	lost    int64
	pending []redis.SlowLog // commands run inside a script not yet read
	byName  map[string]*scriptStat
	stop    chan struct{}
	done    chan struct{}
}

// scriptStat is one top-level command's (or script's) entries.
type scriptStat struct {
	Name   string // command, or "evalsha <sha prefix>", or "fcall <function>"
	Keys   string // a script's keys, ids and namespace left out
	Durs   []time.Duration
	Nested map[string]int // commands the script ran, by name
}

// slowlogBatch is how many entries one read asks for: more than Redis
// logs between two reads (a few tens of thousands a second at 10,000
// threads), few enough that a read stays short.
const slowlogBatch = 50000

func startScriptLog(ctx context.Context, rdb redis.UniversalClient) (*scriptLog, error) {
	for _, kv := range [][2]string{{"slowlog-max-len", fmt.Sprint(4 * slowlogBatch)}, {"slowlog-log-slower-than", "0"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			return nil, err
		}
	}
	if err := rdb.Do(ctx, "slowlog", "reset").Err(); err != nil {
		return nil, err
	}
	l := &scriptLog{rdb: rdb, lastID: -1, byName: map[string]*scriptStat{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				l.read(ctx)
				return
			case <-tick.C:
				l.read(ctx)
			}
		}
	}()
	return l, nil
}

// finish stops logging and returns the statistics, the busiest first.
func (l *scriptLog) finish(ctx context.Context) []*scriptStat {
	close(l.stop)
	<-l.done
	_ = l.rdb.ConfigSet(ctx, "slowlog-log-slower-than", "-1").Err()
	out := make([]*scriptStat, 0, len(l.byName))
	for _, s := range l.byName {
		sort.Slice(s.Durs, func(i, j int) bool { return s.Durs[i] < s.Durs[j] })
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].median()*time.Duration(len(out[i].Durs)) > out[j].median()*time.Duration(len(out[j].Durs))
	})
	return out
}

func (l *scriptLog) read(ctx context.Context) {
	entries, err := l.rdb.SlowLogGet(ctx, slowlogBatch).Result()
	if err != nil {
		return
	}
	// Newest first: take the ones not seen, oldest first.
	sort.Slice(entries, func(i, j int) bool { return entries[i].ID < entries[j].ID })
	for i, e := range entries {
		if e.ID <= l.lastID {
			continue
		}
		if i == 0 && l.lastID >= 0 && e.ID > l.lastID+1 {
			l.lost += e.ID - l.lastID - 1
		}
		l.lastID = e.ID
		l.add(e)
	}
}

// add takes one entry: a command run by a script waits for its script.
func (l *scriptLog) add(e redis.SlowLog) {
	if len(e.Args) == 0 {
		return
	}
	cmd := e.Args[0]
	if cmd == strings.ToUpper(cmd) && cmd != strings.ToLower(cmd) {
		l.pending = append(l.pending, e)
		return
	}
	name, keys := strings.ToLower(cmd), ""
	switch {
	case len(e.Args) <= 2:
	case name == "fcall":
		name, keys = name+" "+e.Args[1], keyShape(e.Args)
	case name == "evalsha" || name == "eval":
		name += " " + strings.Join(strings.Fields(e.Args[1][:min(8, len(e.Args[1]))]), " ")
		keys = keyShape(e.Args)
	}
	if name == "slowlog" || name == "config" || name == "info" {
		l.pending = l.pending[:0]
		return
	}
	s := l.byName[name]
	if s == nil {
		s = &scriptStat{Name: name, Keys: keys, Nested: map[string]int{}}
		l.byName[name] = s
	}
	s.Durs = append(s.Durs, e.Duration)
	for _, p := range l.pending {
		s.Nested[p.Args[0]]++
	}
	l.pending = l.pending[:0]
}

// keyPrefix is a key's namespace (spool's or asynq's, with its hash tag).
var keyPrefix = regexp.MustCompile(`^(spool|asynq):(\{[^}]*\}:)?`)

// keyShape is a script's keys without namespace and ids: "thread active
// events" for a registry commit.
func keyShape(args []string) string {
	var n int
	if _, err := fmt.Sscan(args[2], &n); err != nil {
		return ""
	}
	var parts []string
	for i := 3; i < 3+n && i < len(args); i++ {
		k := keyPrefix.ReplaceAllString(args[i], "")
		if name, _, ok := strings.Cut(k, ":"); ok {
			k = name
		}
		if len(parts) > 0 && parts[len(parts)-1] == k {
			continue // a path of ledger entries
		}
		parts = append(parts, k)
	}
	if strings.HasPrefix(args[3], "asynq:") {
		return "asynq: " + strings.Join(parts, " ")
	}
	return strings.Join(parts, " ")
}

func (s *scriptStat) median() time.Duration {
	if len(s.Durs) == 0 {
		return 0
	}
	return s.Durs[len(s.Durs)/2]
}

// printScripts prints the statistics per turn: calls, the median and mean
// µs per call, and the median times the calls per turn.
func printScripts(stats []*scriptStat, turns int, lost int64) {
	fmt.Printf("fleet: per script and command (SLOWLOG, %d entries lost): calls per turn, µs per call (median, mean), median x calls per turn\n", lost)
	var sum float64
	for _, s := range stats {
		var total time.Duration
		for _, d := range s.Durs {
			total += d
		}
		calls := float64(len(s.Durs)) / float64(turns)
		perTurn := calls * float64(s.median().Microseconds())
		if perTurn < 0.05 {
			continue
		}
		sum += perTurn
		var nested []string
		for k, n := range s.Nested {
			nested = append(nested, fmt.Sprintf("%s %.1f", k, float64(n)/float64(len(s.Durs))))
		}
		sort.Strings(nested)
		fmt.Printf("  %-17s %5.2f calls  %5d %7.1f µs  %6.1f µs/turn  %s", s.Name, calls, s.median().Microseconds(),
			float64(total.Microseconds())/float64(len(s.Durs)), perTurn, s.Keys)
		if len(nested) > 0 {
			fmt.Printf(" [%s]", strings.Join(nested, ", "))
		}
		fmt.Println()
	}
	fmt.Printf("  %-17s %39.1f µs/turn\n", "sum of medians", sum)
}
