package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/history"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// historyCommands are CLI.md's "history" commands: fork, export-script and
// replay.
func historyCommands() []*cli.Command {
	return []*cli.Command{
		{Name: "fork", Usage: "start a new thread from a verified prefix of a thread's transcript", ArgsUsage: "ID --at-turn N",
			Description: "Verifies ID's transcript (strictly), then starts a sibling of ID whose conversation is ID's up to the end of\n" +
				"turn N, tool calls and results as recorded (nothing runs again), with --message appended. The fork carries\n" +
				"what ID's chain had left at turn N (never a fresh budget) and starts with a workspace of its own, as ID's was\n" +
				"at the end of turn N (the built-in file writes recorded up to then, replayed). ID is left as it is.",
			Flags: []cli.Flag{jsonFlag(),
				&cli.IntFlag{Name: "at-turn", Usage: "the turn (from 1) whose end the fork's conversation reaches (required)"},
				&cli.StringFlag{Name: "message", Usage: "a user message the fork adds after the prefix"},
				&cli.StringFlag{Name: "model", Usage: "the fork's model (default: ID's)"}}, Action: threadFork},
		{Name: "export-script", Usage: "print a thread's recorded model turns as a scripted-provider YAML", ArgsUsage: "ID",
			Description: "One entry per recorded model turn (text, tool calls with their inputs, usage) of ID's chain and of every\n" +
				"child it started, under each thread's directive: run it with --model script:FILE as an offline fixture.\n" +
				"--json prints the same script as one JSON object (JSON is YAML: it runs as a script too).",
			Flags:  []cli.Flag{jsonFlag()},
			Action: threadExportScript},
		{Name: "replay", Usage: "run a thread's directive and inputs again, isolated, and compare with the recording", ArgsUsage: "ID",
			Description: "Replays ID's chain from its first thread, children and continuations too, in a scratch embedded Redis and\n" +
				"store, by default on the recorded turns (export-script's script), or with --model on another model or script.\n" +
				"Each turn's tool calls and results are compared with the recording: exit 0 when all match, 1 naming the\n" +
				"first turn that differs and how.",
			Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "model", Usage: "run on this model or script:PATH instead of the recorded turns"},
				&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up the replay after this long (exit 1)"}}, Action: threadReplay},
	}
}

func threadFork(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	if !c.IsSet("at-turn") {
		return usagef("thread fork needs --at-turn N")
	}
	if n := c.Int("at-turn"); n < 1 {
		return usagef("--at-turn %d: turns count from 1", n)
	}
	script, err := readScript(c, c.String("model"))
	if err != nil {
		return err
	}
	s, rec, err := openRecord(c, id, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := checkModelIn(c, s, rec.Bundle, c.String("model")); err != nil {
		return err
	}
	res, err := s.orch.Fork(c.Context, orchestrator.ForkRequest{ThreadID: id, AtTurn: c.Int("at-turn"), Message: c.String("message"), Model: c.String("model"), Script: script})
	var te *transcript.TurnError
	if errors.As(err, &te) {
		return &usageError{msg: te.Error()}
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		// The new thread's id on top, where thread run --json has it.
		return printJSON(c.App.Writer, struct {
			ThreadID string `json:"thread_id"`
			*orchestrator.ForkResult
		}{res.Thread.ThreadID, res})
	}
	fmt.Fprintf(c.App.Writer, "forked %s at turn %d of %d as %s (budget $%.6f, %s)\n",
		res.ForkedFrom, res.ForkTurn, res.Turns, res.Thread.ThreadID, res.Budget, thread.Count(res.WorkspaceFiles, "workspace file", "workspace files"))
	return nil
}

// checkModelIn refuses (exit 2, before a thread exists) a model that no
// worker could run, as thread run does: unknown, or priced neither built
// in nor in the pricing.yaml of bundle, the project a fork or a replay
// runs. "" (the source's model) and scripts (readScript) pass.
func checkModelIn(c *cli.Context, s *services, bundle, model string) error {
	if _, isScript := config.ScriptPath(model); isScript || model == "" {
		return nil
	}
	_, err := launch.CheckModel(c.Context, s.orch, bundle, model)
	if errors.Is(err, launch.ErrRefused) {
		return &usageError{msg: err.Error()}
	}
	return err
}

// readScript reads the script of a "script:PATH" model from the project
// (refused, exit 2, outside it, missing, or not a script that loads); nil
// for any other model.
func readScript(c *cli.Context, model string) ([]byte, error) {
	if _, ok := config.ScriptPath(model); !ok {
		return nil, nil
	}
	proj, err := projectDir(c)
	if err != nil {
		return nil, err
	}
	script, err := launch.ReadScript(proj, model)
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return script, nil
}

// openRecording opens the services read-only (a recording is read, and a
// replay signs with a key of its own) for a thread that must exist and be
// verifiable: with no public key, nothing would say the recording is the
// one that ran.
func openRecording(c *cli.Context, id string) (*services, *spooltype.Record, error) {
	s, rec, err := openRecord(c, id, openOpts{readOnly: true})
	if err != nil {
		return nil, nil, err
	}
	if s.orch.Unverified() {
		s.Close()
		return nil, nil, fmt.Errorf("%s %s: %s", c.Command.Name, id, noKeysNote)
	}
	return s, rec, nil
}

func threadExportScript(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	s, _, err := openRecording(c, id)
	if err != nil {
		return err
	}
	defer s.Close()
	rec, err := history.Load(c.Context, s.orch, id)
	if err != nil {
		return err
	}
	sc, err := history.Export(c.Context, s.orch, rec)
	if err != nil {
		return err
	}
	for _, w := range sc.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "spool: warning: "+w)
	}
	if c.Bool("json") {
		var v any
		if err := yaml.Unmarshal(sc.YAML, &v); err != nil {
			return fmt.Errorf("export-script --json: %w", err)
		}
		return printJSON(c.App.Writer, v)
	}
	_, err = c.App.Writer.Write(sc.YAML)
	return err
}

func threadReplay(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	if c.Duration("timeout") <= 0 {
		return usagef("--timeout %s: must be positive", c.Duration("timeout"))
	}
	model := strings.TrimSpace(c.String("model"))
	script, err := readScript(c, model)
	if err != nil {
		return err
	}
	s, rec, err := openRecording(c, id)
	if err != nil {
		return err
	}
	defer s.Close()
	// The replay runs on the recording's bundle: its pricing.yaml prices
	// the model.
	if err := checkModelIn(c, s, rec.Bundle, model); err != nil {
		return err
	}
	warnReplayKey(c, model)
	rep, err := history.Replay(c.Context, history.ReplayConfig{Source: s.orch, Model: model, Script: script, Timeout: c.Duration("timeout"), Logger: s.log}, id)
	if errors.Is(err, history.ErrNotReplayable) {
		return &usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		fmt.Fprintln(c.App.ErrWriter, "spool: warning: "+w)
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, rep); err != nil {
			return err
		}
	} else {
		printReplay(c.App.Writer, rep)
	}
	if rep.Divergence != nil {
		return &exitError{code: 1, err: errors.New(rep.Divergence.String())}
	}
	return nil
}

// warnReplayKey warns on stderr when the model a replay runs on (not the
// recorded turns, not a script) needs a provider key this process lacks:
// the replay's worker runs here.
func warnReplayKey(c *cli.Context, model string) {
	if _, isScript := config.ScriptPath(model); isScript || model == "" {
		return
	}
	if key := provider.MissingKey(model, provider.ConfigFromEnv()); key != "" {
		fmt.Fprintf(c.App.ErrWriter, "spool: warning: model %s needs %s, which is not set here: the replay's worker runs in this process\n", model, key)
	}
}

// printReplay prints a replay's report as one line: what matched of what
// was compared, what a resume left out, and how the replay ended.
func printReplay(w io.Writer, rep *history.Report) {
	resumed := ""
	if rep.ResumedThreads > 0 {
		resumed = fmt.Sprintf(" (not compared, after a resume: %s, %s; a replay does not send a person's message)",
			thread.Count(rep.ResumedThreads, "thread", "threads"), thread.Count(rep.ResumedTurns, "turn", "turns"))
	}
	fmt.Fprintf(w, "replayed %s on %s: %d of %s, %d of %s matched%s; the replay ended %s\n",
		rep.ThreadID, rep.Model, rep.Threads, thread.Count(rep.RecordedThreads-rep.ResumedThreads, "thread", "threads"),
		rep.Turns, thread.Count(rep.RecordedTurns-rep.ResumedTurns, "turn", "turns"), resumed, rep.Status)
}
