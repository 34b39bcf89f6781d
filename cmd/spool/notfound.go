package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/stack"
)

// What was not found says where it was looked for: a user in the wrong
// directory, project or namespace learns it from the error.

// threadNotFound is a thread a command did not find; run names the Redis
// it looked in (whereKey).
type threadNotFound struct{ id string }

func (e *threadNotFound) Error() string { return fmt.Sprintf("thread %q not found", e.id) }

// whereKey is the app metadata key under which openServices leaves where
// the command's threads are (services.where).
const whereKey = "where"

// where names the Redis s opened, at url, for the user: the dev's (ofDev),
// the data dir's embedded one, or the URL, with the namespace when it is
// not the default.
func (s *services) where(c *cli.Context, url string, ofDev bool) string {
	w := stack.RedactURL(url)
	switch {
	case ofDev:
		w = "the Redis of the spool dev on " + s.dataDir
	case s.embedded != nil:
		w = "the embedded Redis of " + s.dataDir
	}
	if ns := c.String("namespace"); ns != "spool" {
		w += ", namespace " + ns
	}
	return w
}

// directiveNotFound is err, the failed start of a thread, saying where
// its directive was looked for when it was not found:
// a root thread's in the project's directives (the project is the
// current directory unless --project says otherwise), the user's, then
// spool's own; and the one it is a likely misspelling of, when there is.
func directiveNotFound(c *cli.Context, s *services, err error) error {
	if !errors.Is(err, directive.ErrNotFound) || c.String("parent") != "" {
		return err
	}
	where := filepath.Join(s.project, directive.DirectivesDir)
	if s.userDir != "" {
		where += ", " + filepath.Join(s.userDir, directive.DirectivesDir)
	}
	if dm := (*launch.DirectiveMissing)(nil); errors.As(err, &dm) {
		return fmt.Errorf("%w in %s or spool's built-in directives; did you mean %s?", dm.Err, where, dm.Near)
	}
	return fmt.Errorf("%w in %s or spool's built-in directives (the project is %s: run in the project that has it, or pass --project DIR)",
		err, where, s.project)
}
