package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/mcpserver"
	"github.com/spool-run/spool/thread"
)

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve spool to an MCP client over stdio",
		Description: "Serves the tools run_thread (directive, inputs, model, wait), show_thread, wait_thread,\n" +
			"cancel_thread, approve_call, deny_call, read_transcript (thread_id), list_threads (the filters of\n" +
			"thread list), bulk_action, show_bulk, run_graph, show_graph, send_graph_message and show_tenant on\n" +
			"stdin and stdout, so an\n" +
			"MCP client (a coding assistant) can drive a fleet. Root threads are started from the project\n" +
			"directory (--project), as `spool thread run` does. Logs go to stderr.\n" +
			"With --tenant T every tool is bound to T, as an API token bound to T is: runs start in T, and another\n" +
			"tenant's runs answer as unknown ids.",
		Flags:  []cli.Flag{&cli.StringFlag{Name: "tenant", EnvVars: []string{"SPOOL_MCP_TENANT"}, Usage: "bind every tool to this tenant"}},
		Action: runMCP,
	}
}

func runMCP(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	if t := c.String("tenant"); t != "" {
		if err := thread.CheckTenant(t); err != nil {
			return err
		}
	}
	// Cancel, approve and deny sign transcript events: the signing key is
	// needed.
	s, err := openServices(c, openOpts{noEmbedded: true})
	var usage *usageError
	if errors.As(err, &usage) {
		return err
	}
	if err != nil {
		// The client that started us would see a server that died
		// before its handshake, and no reason: serve the handshake and
		// the tool list, and say why on every call.
		fmt.Fprintf(c.App.ErrWriter, "spool: mcp: %v: every tool call fails until spool mcp is restarted\n", err)
		project, perr := projectDir(c)
		if perr != nil {
			return perr
		}
		return mcpserver.ServeStdio(c.Context, mcpserver.Config{Project: project, Version: readBuildVersion().Version, Unavailable: err})
	}
	defer s.Close()
	return mcpserver.ServeStdio(c.Context, mcpserver.Config{Orch: s.orch, Project: s.project, UserDir: s.userDir,
		Version: readBuildVersion().Version, Logger: s.log, Tenant: c.String("tenant")})
}
