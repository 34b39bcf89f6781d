package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/spawn"
	"github.com/spool-run/spool/spooltype"
)

// runChildOfTool is `thread run` inside an external tool's process: the
// worker running the tool serves its call a socket and a token (package
// spawn), and starts the thread there as a child of the calling thread,
// so the tool needs no Redis URL, S3 credentials or signing key. --wait
// and --json work as usual; the parent is always the calling thread.
func runChildOfTool(c *cli.Context, cl *spawn.Client, name string, inputs map[string]any) error {
	for _, f := range []string{"embedded", "follow", "redis-url"} {
		if c.IsSet(f) {
			return usagef("--%s: not inside a tool, whose threads the worker running it starts (%s is set)", f, spawn.SocketEnv)
		}
	}
	if p, self := c.String("parent"), os.Getenv("SPOOL_THREAD_ID"); p != "" && self != "" && p != self {
		return usagef("--parent %s: inside a tool, threads start as children of the calling thread %s", p, self)
	}
	raw, err := cl.Start(c.Context, spawn.Request{Directive: name, Inputs: inputs, Model: c.String("model"),
		Limits: c.StringSlice("limit"), Queue: c.String("queue")})
	if err != nil {
		return err
	}
	var rec spooltype.Record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("the worker's reply: %w", err)
	}
	if !c.Bool("wait") {
		if c.Bool("json") {
			return printJSON(c.App.Writer, &rec)
		}
		fmt.Fprintln(c.App.Writer, rec.ThreadID)
		return nil
	}
	raw, err = cl.Wait(c.Context, []string{rec.ThreadID}, c.Duration("timeout"))
	if err != nil {
		return err
	}
	var res map[string]*spooltype.Record
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("the worker's reply: %w", err)
	}
	final := res[rec.ThreadID]
	if final == nil {
		return fmt.Errorf("the worker's reply has no record of %s", rec.ThreadID)
	}
	return printFinal(c, nil, final)
}
