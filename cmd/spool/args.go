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
	r := &reordering{app: app, args: args}
	i := r.commandPath(1)
	r.commandArgs(i)
	out := append([]string{args[0]}, r.global...)
	out = append(append(out, r.path...), r.flags...)
	if len(r.pos) > 0 {
		out = append(out, "--")
		out = append(out, r.pos...)
	}
	return out
}

// reordering is one command line reorderArgs rearranges: its tokens
// sorted by where they go, and the flags of the command named last.
type reordering struct {
	app  *cli.App
	args []string
	// cmdFlags are the flags of the command named last.
	cmdFlags []cli.Flag
	// global are the global flags, path the command path (with the flags
	// typed before a subcommand), flags the command's flags and pos its
	// positional arguments.
	global, path, flags, pos []string
}

// take moves a flag token (and its value, if the flag in fs it names
// takes one) at args[i] to dst and returns the index of the next token.
func (r *reordering) take(dst *[]string, fs []cli.Flag, i int) int {
	a := r.args[i]
	*dst = append(*dst, a)
	if takesValue(fs, a) && !strings.Contains(a, "=") && i+1 < len(r.args) {
		*dst = append(*dst, r.args[i+1])
		i++
	}
	return i + 1
}

// commandPath reads the global flags and the command path from args[i]
// on, up to the first token that names no subcommand or to a command
// without subcommands, and returns the index where it stopped.
func (r *reordering) commandPath(i int) int {
	cmds := r.app.Commands
	top := true // no command named yet
	for i < len(r.args) {
		a := r.args[i]
		if strings.HasPrefix(a, "-") && a != "-" && a != "--" {
			if top || (!hasFlag(r.cmdFlags, a) && hasFlag(r.app.Flags, a)) {
				i = r.take(&r.global, r.app.Flags, i)
			} else {
				i = r.take(&r.path, r.cmdFlags, i) // a command's flag before its subcommand
			}
			continue
		}
		c := findCommand(cmds, a)
		if c == nil {
			break
		}
		r.path = append(r.path, a)
		cmds, r.cmdFlags, top = c.Subcommands, c.Flags, false
		i++
		if len(cmds) == 0 {
			break
		}
	}
	return i
}

// commandArgs sorts the command's arguments from args[i] on into its
// flags, the global flags typed among them and its positional arguments;
// everything after "--" is positional.
func (r *reordering) commandArgs(i int) {
	for i < len(r.args) {
		a := r.args[i]
		if a == "--" {
			r.pos = append(r.pos, r.args[i+1:]...)
			return
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			if !hasFlag(r.cmdFlags, a) && hasFlag(r.app.Flags, a) {
				i = r.take(&r.global, r.app.Flags, i)
			} else {
				i = r.take(&r.flags, r.cmdFlags, i)
			}
			continue
		}
		r.pos = append(r.pos, a)
		i++
	}
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
