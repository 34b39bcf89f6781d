package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs rearranges a command line the way users type it into the
// order urfave/cli v2 parses:
//
//   - a command's flags go in front of its positional arguments, so that
//     `spool thread run DIRECTIVE --wait` works as CLI.md writes it
//     (urfave/cli v2 stops parsing flags at the first positional argument);
//   - global flags typed after a command (`spool thread run --project
//     examples demo/hello`) go in front of the command path, where
//     urfave/cli looks for them; a command's own flag of the same name
//     stays the command's.
//
// It walks the command tree to know which flags take a value; "--" ends
// the flags as usual.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var global, path []string
	cmds := app.Commands
	var flags []cli.Flag // the current command's
	top := true          // no command named yet
	// take moves a flag token (and its value) at args[i] to dst and
	// returns the index of the next token.
	take := func(dst *[]string, fs []cli.Flag, i int) int {
		a := args[i]
		*dst = append(*dst, a)
		if takesValue(fs, a) && !strings.Contains(a, "=") && i+1 < len(args) {
			*dst = append(*dst, args[i+1])
			i++
		}
		return i + 1
	}
	i := 1
	// Global flags and the command path.
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") && a != "-" && a != "--" {
			if top || (!hasFlag(flags, a) && hasFlag(app.Flags, a)) {
				i = take(&global, app.Flags, i)
			} else {
				i = take(&path, flags, i) // a command's flag before its subcommand
			}
			continue
		}
		c := findCommand(cmds, a)
		if c == nil {
			break
		}
		path = append(path, a)
		cmds, flags, top = c.Subcommands, c.Flags, false
		i++
		if len(cmds) == 0 {
			break
		}
	}
	var pos, fl []string
	for i < len(args) {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			if !hasFlag(flags, a) && hasFlag(app.Flags, a) {
				i = take(&global, app.Flags, i)
			} else {
				i = take(&fl, flags, i)
			}
			continue
		}
		pos = append(pos, a)
		i++
	}
	out := append([]string{args[0]}, global...)
	out = append(append(out, path...), fl...)
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

// flagOf finds the flag a token ("--name", "-name", "--name=value") names.
func flagOf(flags []cli.Flag, tok string) cli.Flag {
	name := strings.TrimLeft(tok, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func hasFlag(flags []cli.Flag, tok string) bool { return flagOf(flags, tok) != nil }

// takesValue reports whether the flag token names a non-boolean flag.
func takesValue(flags []cli.Flag, tok string) bool {
	f := flagOf(flags, tok)
	if f == nil {
		return false
	}
	_, isBool := f.(*cli.BoolFlag)
	return !isBool
}
