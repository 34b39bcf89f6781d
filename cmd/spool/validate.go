package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/thread"
)

// directiveValidate is `spool directive validate PATH|NAME...`: each
// argument is a file, a directory (every .md below it), or a directive
// name resolved in the project as `thread run` resolves it. A directive
// that does not parse or check is an error (exit 1); a capability that
// names no tool or directive the project has is a warning (exit 0).
func directiveValidate(c *cli.Context) error {
	if c.NArg() == 0 {
		return usagef("directive validate takes one or more paths or directive names")
	}
	project, err := projectDir(c)
	if err != nil {
		return err
	}
	home, _ := os.UserHomeDir()
	v := &validator{home: home, known: map[string]*projectKnown{}}
	type res struct {
		Path     string   `json:"path"`
		Valid    bool     `json:"valid"`
		Error    string   `json:"error,omitempty"`
		Warnings []string `json:"warnings,omitempty"`
	}
	var out []res
	var msgs [][]string
	bad := 0
	for _, arg := range c.Args().Slice() {
		// One argument at a time: a directory may hold several files,
		// whose errors are joined under it.
		results := v.validate(project, arg)
		var errs, warns []string
		for _, r := range results {
			if r.err != nil {
				errs = append(errs, r.err.Error())
				continue
			}
			warns = append(warns, r.warnings...)
		}
		if len(errs) > 0 {
			bad++
		}
		out = append(out, res{Path: arg, Valid: len(errs) == 0, Error: strings.Join(errs, "; "), Warnings: warns})
		msgs = append(msgs, errs)
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else {
		for i, r := range out {
			if r.Valid {
				fmt.Fprintf(c.App.Writer, "ok   %s\n", r.Path)
			}
			for _, w := range r.Warnings {
				fmt.Fprintf(c.App.Writer, "warn %s\n", w)
			}
			for _, m := range msgs[i] {
				fmt.Fprintf(c.App.Writer, "FAIL %s\n", m)
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %s invalid", bad, thread.Count(len(out), "directive", "directives"))
	}
	return nil
}

// validator validates directives against the projects they belong to,
// reading each project's tools, MCP servers and directives once.
type validator struct {
	home  string
	known map[string]*projectKnown // by project root
}

type projectKnown struct {
	known    directive.Known
	problems []string // said once, with the first directive of the project
}

// validated is one directive file's outcome.
type validated struct {
	err      error
	warnings []string
}

// validate validates arg: a path (file or directory) when there is one,
// else a directive name resolved in project.
func (v *validator) validate(project, arg string) []validated {
	if _, statErr := os.Stat(arg); statErr != nil {
		name, nameErr := directive.CleanName(arg)
		if nameErr != nil {
			return []validated{{err: fmt.Errorf("%s: %w", arg, statErr)}}
		}
		d, _, err := directive.NewResolver(project, v.home).Resolve(name)
		if errors.Is(err, directive.ErrNotFound) {
			return []validated{{err: fmt.Errorf("%s: no such file, and no directive %s in %s, %s or the built-in directives", arg, name,
				filepath.Join(project, directive.DirectivesDir), filepath.Join("~", directive.DirectivesDir))}}
		}
		if err == nil {
			err = directive.Check(d)
		}
		if err != nil {
			return []validated{{err: err}}
		}
		return []validated{{warnings: v.lint(project, d)}}
	}
	var out []validated
	for _, r := range directive.ValidatePaths([]string{arg}) {
		if r.Err != nil {
			out = append(out, validated{err: r.Err})
			continue
		}
		out = append(out, validated{warnings: v.lint(projectOf(r.Path, project), r.Directive)})
	}
	return out
}

// lint is d's warnings in project, the project's problems the first time.
func (v *validator) lint(project string, d *directive.Directive) []string {
	pk, ok := v.known[project]
	if !ok {
		k, problems := launch.Known(os.DirFS(project), directive.NewResolver(project, v.home))
		pk = &projectKnown{known: k, problems: problems}
		v.known[project] = pk
	}
	var out []string
	for _, p := range pk.problems {
		out = append(out, project+": "+p)
	}
	pk.problems = nil
	for _, w := range directive.Lint(d, pk.known) {
		out = append(out, d.Path+": "+w)
	}
	return out
}

// projectOf is the project a directive file belongs to: the directory
// holding the .ai/directives it lies in, else def.
func projectOf(file, def string) string {
	abs, err := filepath.Abs(file)
	if err != nil {
		return def
	}
	sep := string(filepath.Separator)
	marker := sep + filepath.FromSlash(directive.DirectivesDir) + sep
	if i := strings.LastIndex(abs, marker); i >= 0 {
		return abs[:i]
	}
	return def
}
