// Command spool runs LLM agent threads as a distributed job queue. See
// CLI.md for the contract: every command takes --json where it prints data,
// reads SPOOL_* environment variables (a flag wins), exits 0 on success, 1
// on a failed operation and 2 on bad usage, and prints errors as one line.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spool-run/spool/thread"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals()...)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stopSignals end a command as Ctrl-C does (a server stops in order, a
// wait says what goes on): SIGINT, SIGTERM, and the SIGHUP of a closed
// terminal, unless the process was started to ignore it (nohup), which
// catching it would undo.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// run executes the CLI and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr *os.File) int {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, reorderArgs(app, args))
	if err == nil {
		return 0
	}
	code := 1
	var ue *usageError
	if errors.As(err, &ue) || isFlagError(err) {
		code = 2
	}
	var ae *thread.AdmissionError
	if errors.As(err, &ae) {
		code = ae.Exit()
	}
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	msg := err.Error()
	var nf *threadNotFound
	if where, _ := app.Metadata[whereKey].(string); errors.As(err, &nf) && where != "" {
		msg += " in " + where
	}
	fmt.Fprintln(stderr, "spool: "+oneLine(msg))
	return code
}
