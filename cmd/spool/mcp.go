package main

import (
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/mcpserver"
)

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve spool to an MCP client over stdio",
		Description: "Serves the tools run_thread (directive, inputs, model, wait), show_thread, wait_thread,\n" +
			"cancel_thread, approve_call, deny_call and read_transcript (thread_id) on stdin and stdout, so an\n" +
			"MCP client (a coding assistant) can drive a fleet. Root threads are started from the project\n" +
			"directory (--project), as `spool thread run` does. Logs go to stderr.",
		Action: runMCP,
	}
}

func runMCP(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	// Cancel, approve and deny sign transcript events: the signing key is
	// needed.
	s, err := openServices(c, openOpts{noEmbedded: true})
	if err != nil {
		return err
	}
	defer s.Close()
	return mcpserver.ServeStdio(c.Context, mcpserver.Config{Orch: s.orch, Project: s.project, UserDir: s.userDir,
		Version: readBuildVersion().Version, Logger: s.log})
}
