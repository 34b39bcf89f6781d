package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs moves a command's flags in front of its positional arguments,
// so that `spool thread run DIRECTIVE --wait` works as CLI.md writes it
// (urfave/cli v2 stops parsing flags at the first positional argument). It
// walks the command tree to know which flags take a value; "--" ends the
// flags as usual.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	cmds := app.Commands
	flags := app.Flags
	i := 1
	// Global flags and the command path.
	for i < len(args) {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
			if takesValue(flags, a) && !strings.Contains(a, "=") && i+1 < len(args) {
				out = append(out, args[i+1])
				i++
			}
			i++
			continue
		}
		c := findCommand(cmds, a)
		if c == nil {
			break
		}
		out = append(out, a)
		cmds, flags = c.Subcommands, c.Flags
		i++
		if len(cmds) == 0 {
			break
		}
	}
	var pos, fl []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			fl = append(fl, a)
			if takesValue(flags, a) && !strings.Contains(a, "=") && i+1 < len(args) {
				fl = append(fl, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	out = append(out, fl...)
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

// takesValue reports whether the flag token names a non-boolean flag.
func takesValue(flags []cli.Flag, tok string) bool {
	name := strings.TrimLeft(tok, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
