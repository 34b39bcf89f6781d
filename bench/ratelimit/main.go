// Command ratelimit measures spool's fleet-wide model rate limits
// (rate_limits.yaml) against a model server that enforces its own, over
// the real Anthropic wire format: an HTTP server in this process answers
// POST /v1/messages (JSON or SSE) after a fixed latency, and answers 429
// with retry-after beyond its own rate when it has one. Several spool
// workers (each its own orchestrator and asynq server, as separate
// processes would have) share one Redis.
//
// Two experiments, run one after the other:
//
//   - rpm: a rule of -rpm requests per minute and a server without a
//     limit; threads keep more calls ready than the rule admits for
//     -duration. Printed: the calls the server received per second over
//     the window, against the rule's rate.
//
//   - storm: a server that admits -server-rps requests per second (a token
//     bucket of a second's worth) and answers 429 beyond; -threads
//     one-call threads on -workers workers, first without a rule, then
//     with a matching requests_per_minute rule. Printed per run: the 429s
//     the server sent, the time until every thread ended, and the ideal
//     time (calls beyond the first second's worth at the server's rate,
//     plus one call's latency).
//
//     go run ./bench/ratelimit -duration 30s -rpm 600 -threads 200 -workers 4 -server-rps 20
//
// With no -redis it starts a redis-server from PATH on a free port.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
	"github.com/spool-run/spool/worker"
)

const model = "claude-sonnet-4-5"

func main() {
	duration := flag.Duration("duration", 30*time.Second, "rpm: how long the rate is measured")
	rpm := flag.Int("rpm", 600, "rpm: the rule's requests_per_minute")
	threads := flag.Int("threads", 200, "storm: one-call threads")
	workers := flag.Int("workers", 4, "workers (each its own orchestrator and asynq server)")
	conc := flag.Int("concurrency", 10, "concurrency of each worker")
	serverRPS := flag.Int("server-rps", 20, "storm: requests per second the server admits before answering 429")
	latency := flag.Duration("latency", 100*time.Millisecond, "the server's time to answer a call")
	redisURL := benchenv.RedisFlag()
	only := flag.String("only", "", "run one experiment: rpm or storm (default: both)")
	flag.Parse()
	b := &bench{workers: *workers, conc: *conc, latency: *latency}
	err := b.setup(*redisURL)
	if err == nil && (*only == "" || *only == "rpm") {
		err = b.rpm(*rpm, *duration)
	}
	if err == nil && (*only == "" || *only == "storm") {
		err = b.storm(*threads, *serverRPS)
	}
	b.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	workers, conc int
	latency       time.Duration
	tmp           string
	rdb           redis.UniversalClient
	store         blobstore.Store
	signer        *transcript.Signer
	stop          []func()
}

func (b *bench) setup(redisURL string) error {
	rdb, tmp, stop, err := benchenv.Scratch("spool-bench-ratelimit-", redisURL)
	if err != nil {
		return err
	}
	b.rdb, b.tmp = rdb, tmp
	b.stop = append(b.stop, stop)
	b.store = blobstore.NewMemory()
	b.signer, err = transcript.GenerateKey()
	return err
}

func (b *bench) close() {
	for i := len(b.stop) - 1; i >= 0; i-- {
		b.stop[i]()
	}
}

// fleet is a run's workers, each with its own orchestrator, over one
// namespace, and the bundle of the project they run.
type fleet struct {
	orchs  []*orchestrator.Orchestrator
	stop   []func()
	bundle string
}

// start starts b.workers workers calling the model at server's URL, in a
// fresh namespace, for a project whose rate_limits.yaml is rules ("" for
// none).
func (b *bench) start(name, serverURL, rules string) (*fleet, error) {
	ctx := context.Background()
	project := filepath.Join(b.tmp, name)
	files := map[string]string{".ai/directives/rl/call.md": benchenv.Directive("call", `turns="2"`)}
	if rules != "" {
		files[".ai/config/agent/rate_limits.yaml"] = rules
	}
	if err := benchenv.WriteProject(project, files); err != nil {
		return nil, err
	}
	f := &fleet{}
	var err error
	if f.bundle, err = directive.BuildBundle(ctx, b.store, project, "", nil); err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("rl-%s-%d", name, time.Now().UnixNano())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	pc := provider.Config{AnthropicAPIKey: "bench-key", AnthropicBaseURL: serverURL}
	for range b.workers {
		client := asynq.NewClientFromRedisClient(b.rdb)
		o, err := orchestrator.New(orchestrator.Config{Namespace: ns, Logger: log}, b.rdb, b.store, &queue.Enqueuer{Client: client},
			b.signer, transcript.NewKeyring(b.signer.PublicKey()))
		if err != nil {
			return nil, err
		}
		w, err := worker.New(worker.Config{Concurrency: b.conc, Queues: map[string]int{queue.DefaultQueue: 1}, Logger: log,
			RecoverInterval: -1, Provider: &pc}, o)
		if err != nil {
			f.close()
			return nil, err
		}
		if err := w.Start(); err != nil {
			f.close()
			return nil, err
		}
		f.orchs = append(f.orchs, o)
		f.stop = append(f.stop, w.Stop)
	}
	return f, nil
}

func (f *fleet) close() {
	for _, stop := range f.stop {
		stop()
	}
}

// run starts n threads, spread over the fleet's orchestrators, and returns
// their ids.
func (f *fleet) run(n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		rec, err := f.orchs[i%len(f.orchs)].Start(context.Background(),
			orchestrator.StartRequest{Directive: "rl/call", Bundle: f.bundle, Model: model})
		if err != nil {
			return nil, err
		}
		ids[i] = rec.ThreadID
	}
	return ids, nil
}

// rpm measures the rate a requests_per_minute rule lets through.
func (b *bench) rpm(rpm int, window time.Duration) error {
	srv := newServer(b.latency, 0)
	defer srv.Close()
	f, err := b.start("rpm", srv.URL, fmt.Sprintf("rate_limits: [{match: 'claude-*', requests_per_minute: %d}]\n", rpm))
	if err != nil {
		return err
	}
	defer f.close()
	// Enough threads that calls are always waiting: the rule's rate over
	// the window and a margin.
	want := float64(rpm) / 60
	n := int(want*(window.Seconds()+5)) + 2*b.workers*b.conc
	fmt.Printf("rpm: rule %d/min (%.2f/s), %d threads on %d workers x %d, server latency %s, window %s\n",
		rpm, want, n, b.workers, b.conc, b.latency, window)
	if _, err := f.run(n); err != nil {
		return err
	}
	first := srv.waitFirst()
	// The first second holds the rule's burst (a second's worth): measure
	// the steady rate after it.
	from := first.Add(time.Second)
	time.Sleep(time.Until(from.Add(window)) + b.latency)
	got := srv.countBetween(from, from.Add(window))
	rate := float64(got) / window.Seconds()
	fmt.Printf("rpm: %d calls in %s after the first second: %.2f/s, %.1f%% of the rule's rate (429s: %d)\n",
		got, window, rate, 100*rate/want, srv.refused.Load())
	per := srv.perSecond(from, from.Add(window))
	fmt.Printf("rpm: calls per second over the window: min %d, median %d, max %d\n", per[0], per[len(per)/2], per[len(per)-1])
	return nil
}

// storm runs the same threads against a server that answers 429 beyond
// its rate, without and then with a rule of that rate.
func (b *bench) storm(threads, serverRPS int) error {
	ideal := time.Duration(float64(threads-serverRPS)/float64(serverRPS)*float64(time.Second)) + b.latency
	fmt.Printf("storm: %d one-call threads on %d workers x %d; the server admits %d/s (429 beyond), latency %s; ideal %.2fs\n",
		threads, b.workers, b.conc, serverRPS, b.latency, ideal.Seconds())
	for _, withRule := range []bool{false, true} {
		srv := newServer(b.latency, serverRPS)
		rules, name := "", "storm-norule"
		if withRule {
			rules, name = fmt.Sprintf("rate_limits: [{match: 'claude-*', requests_per_minute: %d}]\n", serverRPS*60), "storm-rule"
		}
		f, err := b.start(name, srv.URL, rules)
		if err != nil {
			srv.Close()
			return err
		}
		start := time.Now()
		ids, err := f.run(threads)
		ended := map[string]int{}
		if err == nil {
			var res map[string]*registry.Record
			res, err = f.orchs[0].Wait(context.Background(), ids, 10*time.Minute)
			for _, id := range ids {
				if err == nil {
					st := string(res[id].Status)
					if res[id].Error != nil {
						st += " " + res[id].Error.Code
					}
					ended[st]++
				}
			}
		}
		elapsed := time.Since(start)
		f.close()
		srv.Close()
		if err != nil {
			return err
		}
		label := "without a rule"
		if withRule {
			label = fmt.Sprintf("with requests_per_minute: %d", serverRPS*60)
		}
		fmt.Printf("storm %s: %d calls answered, %d answered 429; all ended in %.2fs, %.2f of the ideal; threads: %v\n",
			label, srv.count(), srv.refused.Load(), elapsed.Seconds(), elapsed.Seconds()/ideal.Seconds(), ended)
	}
	return nil
}

// server is a model server speaking the Anthropic Messages API.
type server struct {
	*httptest.Server
	latency time.Duration
	rps     int // 0: no limit

	mu      sync.Mutex
	calls   []time.Time // answered calls, at arrival
	tokens  float64     // the token bucket, when rps > 0
	last    time.Time
	first   chan struct{}
	once    sync.Once
	refused atomic.Int64
}

func newServer(latency time.Duration, rps int) *server {
	s := &server{latency: latency, rps: rps, tokens: float64(rps), last: time.Now(), first: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// admit reports whether the server's own limit lets a call in now.
func (s *server) admit(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rps > 0 {
		s.tokens = min(float64(s.rps), s.tokens+now.Sub(s.last).Seconds()*float64(s.rps))
		s.last = now
		if s.tokens < 1 {
			return false
		}
		s.tokens--
	}
	s.calls = append(s.calls, now)
	return true
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream bool `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &req)
	now := time.Now()
	if !s.admit(now) {
		s.refused.Add(1)
		w.Header().Set("retry-after", "1")
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`)
		return
	}
	s.once.Do(func() { close(s.first) })
	time.Sleep(s.latency)
	if !req.Stream {
		w.Header().Set("content-type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_bench","type":"message","role":"assistant","model":"`+model+`",`+
			`"content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","stop_sequence":null,`+
			`"usage":{"input_tokens":100,"output_tokens":10}}`)
		return
	}
	w.Header().Set("content-type", "text/event-stream")
	for _, ev := range [][2]string{
		{"message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"` + model + `","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"done"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":10}}`},
		{"message_stop", `{"type":"message_stop"}`},
	} {
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev[0], ev[1])
	}
}

func (s *server) waitFirst() time.Time {
	<-s.first
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[0]
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *server) countBetween(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if !c.Before(from) && c.Before(to) {
			n++
		}
	}
	return n
}

// perSecond returns the calls of each whole second in [from, to), sorted.
func (s *server) perSecond(from, to time.Time) []int {
	secs := int(to.Sub(from) / time.Second)
	out := make([]int, max(secs, 1))
	s.mu.Lock()
	for _, c := range s.calls {
		if i := int(c.Sub(from) / time.Second); !c.Before(from) && i < secs {
			out[i]++
		}
	}
	s.mu.Unlock()
	sort.Ints(out)
	return out
}
