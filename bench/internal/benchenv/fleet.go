package benchenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/transcript"
	"github.com/spool-run/spool/worker"
)

// FleetConfig shapes a Fleet.
type FleetConfig struct {
	Namespace string
	Shards    int // orchestrator.Config.Shards
	// Files are the project's files (directives), written under Dir.
	Files map[string]string
	Dir   string
	// Script is the scripted model's script, bundled at ScriptPath.
	ScriptPath, Script string
	// MoreScripts are more scripted models' scripts by path, bundled too
	// (a start names one as its model, "script:" + path).
	MoreScripts map[string]string
	Concurrency int // the worker's
	// TaskCheckInterval is the worker's (0: its default).
	TaskCheckInterval time.Duration
}

// Fleet is an orchestrator over a Redis and a store, a project bundled
// with a scripted model, and one in-process worker running its threads.
type Fleet struct {
	O      *orchestrator.Orchestrator
	W      *worker.Worker
	Bundle string
	Model  string // "script:" + ScriptPath
}

// NewFleet writes the project, bundles it and starts the worker; Close
// stops it.
func NewFleet(ctx context.Context, rdb redis.UniversalClient, store blobstore.Store, cfg FleetConfig) (*Fleet, error) {
	project := filepath.Join(cfg.Dir, "project")
	if err := WriteProject(project, cfg.Files); err != nil {
		return nil, err
	}
	extra := map[string][]byte{cfg.ScriptPath: []byte(cfg.Script)}
	for p, s := range cfg.MoreScripts {
		extra[p] = []byte(s)
	}
	bundle, err := directive.BuildBundle(ctx, store, project, "", extra)
	if err != nil {
		return nil, err
	}
	signer, err := transcript.GenerateKey()
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	o, err := orchestrator.New(orchestrator.Config{Namespace: cfg.Namespace, Shards: cfg.Shards, Logger: log}, rdb, store,
		&queue.Enqueuer{Client: asynq.NewClientFromRedisClient(rdb)}, signer, transcript.NewKeyring(signer.PublicKey()))
	if err != nil {
		return nil, err
	}
	w, err := worker.New(worker.Config{Concurrency: cfg.Concurrency, Queues: map[string]int{queue.DefaultQueue: 1}, Logger: log, RecoverInterval: -1, TaskCheckInterval: cfg.TaskCheckInterval}, o)
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	return &Fleet{O: o, W: w, Bundle: bundle, Model: "script:" + cfg.ScriptPath}, nil
}

// Close stops the worker.
func (f *Fleet) Close() { f.W.Stop() }

// StartThreads starts n threads of directive from producers goroutines
// and returns their ids, in order.
func (f *Fleet) StartThreads(ctx context.Context, directive string, n, producers int) ([]string, error) {
	ids := make([]string, n)
	err := Produce(n, producers, func(i int) error {
		rec, err := f.O.Start(ctx, orchestrator.StartRequest{Directive: directive, Bundle: f.Bundle, Model: f.Model})
		if err != nil {
			return err
		}
		ids[i] = rec.ThreadID
		return nil
	})
	return ids, err
}

// FileTurns is a scripted directive's turns (the lines under its name in
// a script): turns-1 file tool calls, alternately a write and a read of
// the thread's own file, then the answer "done".
func FileTurns(turns int) string {
	var b strings.Builder
	for i := 1; i < turns; i++ {
		if i%2 == 1 {
			fmt.Fprintf(&b, "    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: notes.txt, content: \"turn %d\"}}]\n", i)
		} else {
			b.WriteString("    - tool_calls: [{tool: rye/file-system/fs_read, input: {path: notes.txt}}]\n")
		}
		b.WriteString("      usage: {input: 100, output: 10}\n")
	}
	b.WriteString("    - text: done\n      usage: {input: 100, output: 10}\n")
	return b.String()
}
