package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/stack"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
	"github.com/spool-run/spool/worker"
)

// ReplayScript is where a replay's bundle holds the script it plays
// (a bundle extra, read as "script:" + ReplayScript).
const ReplayScript = ".spool/replay.yaml"

// ReplayConfig configures Replay.
type ReplayConfig struct {
	// Source reads the recording. Required.
	Source *orchestrator.Orchestrator
	// Model is what the replay runs every thread on: "" plays the
	// recorded turns (Export); "script:PATH" plays Script; any other
	// model id calls that model (the worker's provider keys apply).
	Model string
	// Script is the script of a "script:PATH" Model.
	Script []byte
	// Dir holds the replay's scratch state (an embedded Redis, a local
	// blob store, a signing key) and is removed at the end. Default: a new
	// temporary directory.
	Dir string
	// Timeout bounds the replay's run. Default 10m.
	Timeout time.Duration
	// Concurrency of the replay's in-process worker. Default 4.
	Concurrency int
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Report is the outcome of a replay.
type Report struct {
	// Match: every recorded turn's tool calls and results were replayed
	// alike.
	Match bool `json:"match"`
	// ThreadID is the replayed thread: the first of the recorded chain.
	ThreadID string `json:"thread_id"`
	// Model is what the replay ran on ("script:" + ReplayScript for the
	// recorded turns).
	Model string `json:"model"`
	// Threads and Turns count the recorded threads and turns that
	// matched; RecordedThreads and RecordedTurns what the recording holds.
	Threads         int `json:"threads"`
	Turns           int `json:"turns"`
	RecordedThreads int `json:"recorded_threads"`
	RecordedTurns   int `json:"recorded_turns"`
	// ResumedThreads and ResumedTurns are the part of the recording that
	// came after a resume (the resumed threads and all they started): a
	// person's message, which a replay does not send, so not compared.
	ResumedThreads int `json:"resumed_threads,omitempty"`
	ResumedTurns   int `json:"resumed_turns,omitempty"`
	// Status is how the replayed thread's chain ended.
	Status thread.Status `json:"status"`
	// Divergence is the first difference; nil on a match.
	Divergence *Divergence `json:"divergence,omitempty"`
	// Warnings are Export's.
	Warnings []string `json:"warnings,omitempty"`
}

// ErrNotReplayable is a thread Replay cannot run again: a fork, whose
// conversation opens with another thread's prefix.
var ErrNotReplayable = errors.New("not replayable")

// Replay runs thread id's directive and inputs again in isolation and
// compares the run with the recording (Compare). The chain id belongs to
// is replayed from its first thread, with that thread's directive,
// inputs and limits, and every thread it starts, children and
// continuations, runs too. Isolation: an embedded Redis (redis-server on
// PATH, else in-process), a local blob store and a signing key of its
// own, all in a scratch directory removed at the end, and an in-process
// worker; nothing of the source's Redis or store is written. The
// recording's bundle is copied there with the script as an extra file.
// Every thread runs cfg.Model (orchestrator.Config.Model), and is named
// as the recording named it (a child by its parent and its place among
// the parent's spawns, a continuation by the thread it continues), so
// that ids in tool inputs and results compare as they are.
//
// Not replayed: a fork (ErrNotReplayable: replay the thread it was forked
// from), what a person added (a resume, sent messages), decisions on
// approval-gated calls (a replayed thread that waits for one stops the
// replay, reported as a divergence).
func Replay(ctx context.Context, cfg ReplayConfig, id string) (*Report, error) {
	cfg.setDefaults()
	rec, err := Load(ctx, cfg.Source, id)
	if err != nil {
		return nil, err
	}
	if rec.Record.ForkedFrom != "" {
		return nil, fmt.Errorf("thread %s: %w: it is a fork of %s at turn %d, and its conversation opens with that prefix; replay %s",
			rec.ID(), ErrNotReplayable, rec.Record.ForkedFrom, rec.Record.ForkTurn, rec.Record.ForkedFrom)
	}
	report := newReport(rec, cfg.Model)
	extra, err := replayExtra(ctx, cfg, rec, report)
	if err != nil {
		return nil, err
	}

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "spool-replay-"); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(dir)
	sc, err := openScratch(ctx, dir, cfg, rec, report.Model)
	if err != nil {
		return nil, err
	}
	defer sc.close()

	b, err := cfg.Source.LoadBundle(ctx, rec.Record.Bundle)
	if err != nil {
		return nil, err
	}
	digest, err := b.CopyTo(ctx, sc.store, extra)
	if err != nil {
		return nil, fmt.Errorf("replay bundle: %w", err)
	}
	l := rec.Record.Limits
	limits := thread.Limits{Turns: &l.Turns, Tokens: &l.Tokens, Spend: &l.Spend, Depth: &l.Depth, Spawns: &l.Spawns, Duration: &l.Duration}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if _, err := sc.orch.Start(runCtx, orchestrator.StartRequest{ID: rec.ID(), Directive: rec.Record.Directive, Inputs: rec.Record.Inputs,
		Model: report.Model, LimitOverrides: limits, Bundle: digest, Queue: rec.Record.Queue,
		Tenant: rec.Record.TenantOrDefault(), Priority: rec.Record.PriorityOrDefault()}); err != nil {
		return nil, fmt.Errorf("replay %s: %w", rec.ID(), err)
	}
	if err := sc.settle(runCtx); err != nil {
		return nil, fmt.Errorf("replay %s: %w", rec.ID(), err)
	}
	rep, err := Load(ctx, sc.orch, rec.ID())
	if err != nil {
		return nil, fmt.Errorf("replay %s: read the replay: %w", rec.ID(), err)
	}
	report.Threads, report.Turns, report.Divergence = Compare(rec, rep)
	report.Match = report.Divergence == nil
	last := rep
	for last.Continuation != nil {
		last = last.Continuation
	}
	report.Status = last.Record.Status
	return report, nil
}

// setDefaults fills in the defaults ReplayConfig documents.
func (cfg *ReplayConfig) setDefaults() {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
}

// newReport is the report of a replay of rec on model, with what the
// recording holds counted: all of it, and the part after a resume, which
// a replay does not compare.
func newReport(rec *Thread, model string) *Report {
	report := &Report{ThreadID: rec.ID(), Model: model}
	rec.Walk(func(t *Thread) {
		report.RecordedThreads++
		report.RecordedTurns += len(t.Turns)
	})
	report.ResumedThreads, report.ResumedTurns = report.RecordedThreads, report.RecordedTurns
	rec.WalkReplayed(func(t *Thread) {
		report.ResumedThreads--
		report.ResumedTurns -= len(t.Turns)
	})
	return report
}

// replayExtra is the files the replay's bundle holds besides the
// recording's: for the recorded turns (no model), rec exported as the
// script at ReplayScript, which report then names as its model and whose
// warnings it carries; for a "script:PATH" model, cfg.Script at PATH;
// for any other model, none.
func replayExtra(ctx context.Context, cfg ReplayConfig, rec *Thread, report *Report) (map[string][]byte, error) {
	extra := map[string][]byte{}
	switch p, isScript := config.ScriptPath(cfg.Model); {
	case cfg.Model == "":
		s, err := Export(ctx, cfg.Source, rec)
		if err != nil {
			return nil, err
		}
		report.Warnings = s.Warnings
		report.Model = config.ScriptPrefix + ReplayScript
		extra[ReplayScript] = s.YAML
	case isScript:
		if len(cfg.Script) == 0 {
			return nil, fmt.Errorf("replay on %s: no script given", cfg.Model)
		}
		extra[p] = cfg.Script
	}
	return extra, nil
}

// scratch is a replay's isolated services.
type scratch struct {
	emb  *stack.Embedded
	rdb  interface{ Close() error }
	cli  *asynq.Client
	orch *orchestrator.Orchestrator
	// store is the replay's blob store, the scratch orchestrator's.
	store blobstore.Store
	w     *worker.Worker
	log   *slog.Logger
}

func openScratch(ctx context.Context, dir string, cfg ReplayConfig, rec *Thread, model string) (sc *scratch, err error) {
	sc = &scratch{log: cfg.Logger}
	defer func() {
		if err != nil {
			sc.close()
		}
	}()
	if sc.emb, err = stack.StartEmbedded(dir, cfg.Logger); err != nil {
		return nil, err
	}
	rdb, err := stack.OpenRedis(sc.emb.URL)
	if err != nil {
		return nil, err
	}
	sc.rdb = rdb
	store, err := blobstore.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		return nil, err
	}
	sc.store = store
	keyDir := filepath.Join(dir, "keys")
	signer, _, err := transcript.InitKeys(keyDir, false)
	if err != nil {
		return nil, err
	}
	keyring, err := transcript.LoadKeyring(keyDir, signer)
	if err != nil {
		return nil, err
	}
	sc.cli = asynq.NewClientFromRedisClient(rdb)
	names := namesOf(rec)
	sc.orch, err = orchestrator.New(orchestrator.Config{Namespace: "replay", Logger: cfg.Logger, LeaseTTL: 5 * time.Second,
		NewID: names.id, Model: model}, rdb, store, &orchestrator.Enqueuer{Client: sc.cli}, signer, keyring)
	if err != nil {
		return nil, err
	}
	queues := map[string]int{orchestrator.DefaultQueue: 1}
	rec.Walk(func(t *Thread) {
		if t.Record.Queue != "" {
			queues[t.Record.Queue] = 1
		}
	})
	if sc.w, err = worker.New(worker.Config{Concurrency: cfg.Concurrency, Queues: queues, Logger: cfg.Logger, RecoverInterval: time.Second,
		ShutdownTimeout: 5 * time.Second}, sc.orch); err != nil {
		return nil, err
	}
	if err := sc.w.Start(); err != nil {
		sc.w = nil
		return nil, err
	}
	return sc, nil
}

// settle waits until no thread of the replay is active; a thread waiting
// for a person's approval ends the wait (a replay decides none).
func (sc *scratch) settle(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		active, err := sc.orch.Active(ctx)
		if err != nil {
			return err
		}
		if len(active) == 0 {
			return nil
		}
		for _, r := range active {
			if r.Status == thread.StatusWaiting && r.WaitingFor == orchestrator.WaitingForApproval {
				return fmt.Errorf("thread %s waits for a person's approval of a tool call: a replay decides none", r.ThreadID)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d threads still running: %w", len(active), ctx.Err())
		case <-tick.C:
		}
	}
}

func (sc *scratch) close() {
	if sc.w != nil {
		sc.w.Stop()
	}
	if sc.cli != nil {
		_ = sc.cli.Close()
	}
	if sc.rdb != nil {
		_ = sc.rdb.Close()
	}
	sc.emb.Stop()
}

// names gives a replay's threads the recording's ids: a child the id of
// the recorded child in the same place among its parent's spawns (and of
// the same directive), a continuation the id of the recorded thread that
// continued the same thread. Anything else gets a new id.
type names struct {
	mu       sync.Mutex
	children map[string][]*spooltype.Record
	next     map[string]int
	cont     map[string]string
}

func namesOf(rec *Thread) *names {
	n := &names{children: map[string][]*spooltype.Record{}, next: map[string]int{}, cont: map[string]string{}}
	rec.Walk(func(t *Thread) {
		for _, k := range t.Children {
			n.children[t.ID()] = append(n.children[t.ID()], k.Record)
		}
		if c := t.Continuation; c != nil && c.Record.ContinuationKind != orchestrator.KindResume {
			n.cont[t.ID()] = c.ID()
		}
	})
	return n
}

func (n *names) id(r orchestrator.IDRequest) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.PreviousThreadID != "" {
		id := n.cont[r.PreviousThreadID]
		delete(n.cont, r.PreviousThreadID)
		return id
	}
	if r.ParentID == "" {
		return ""
	}
	kids, k := n.children[r.ParentID], n.next[r.ParentID]
	if k >= len(kids) || kids[k].Directive != r.Directive {
		return ""
	}
	n.next[r.ParentID] = k + 1
	return kids[k].ThreadID
}
