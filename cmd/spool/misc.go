package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/transcript"
)

func keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "signing keys",
		Subcommands: []*cli.Command{{
			Name:  "init",
			Usage: "make an Ed25519 key pair at SPOOL_SIGNING_KEY, else in <data-dir>/keys (or --dir)",
			Flags: []cli.Flag{jsonFlag(), &cli.StringFlag{Name: "dir", Usage: "directory for the key pair (default: SPOOL_SIGNING_KEY's, else <data-dir>/keys)"}, &cli.BoolFlag{Name: "force", Usage: "replace an existing key"},
				&cli.StringFlag{Name: "public-dir", Usage: "also write the public key (<keyid>.pub) to this directory, for readers' SPOOL_TRUSTED_KEYS"}},
			Action: func(c *cli.Context) error {
				if err := noArgs(c); err != nil {
					return err
				}
				path, err := newKeyPath(c)
				if err != nil {
					return err
				}
				signer, created, err := transcript.InitKeyFile(path, c.Bool("force"))
				if err != nil {
					return err
				}
				out := map[string]any{"key_id": signer.KeyID(), "created": created, "private_key": path,
					"public_key": filepath.Join(filepath.Dir(path), signer.KeyID()+".pub")}
				if pd := c.String("public-dir"); pd != "" {
					if out["exported_public_key"], err = signer.SavePublicKey(pd); err != nil {
						return err
					}
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, out)
				}
				verb := "made"
				if !created {
					verb = "exists (use --force to replace it)"
				}
				fmt.Fprintf(c.App.Writer, "key %s %s\nprivate %s\npublic  %s\n", out["key_id"], verb, out["private_key"], out["public_key"])
				return nil
			},
		}},
	}
}

// newKeyPath is where `keys init` puts the private key: in --dir, else at
// --signing-key (SPOOL_SIGNING_KEY, where every other command looks for
// it: a file, or a directory holding signing.key), else in the data dir's
// keys/.
func newKeyPath(c *cli.Context) (string, error) {
	dir := c.String("dir")
	if p := c.String("signing-key"); dir == "" && p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if st, err := os.Stat(abs); (err == nil && st.IsDir()) || strings.HasSuffix(p, string(filepath.Separator)) {
			dir = abs
		} else {
			return abs, nil
		}
	}
	if dir == "" {
		dd, err := dataDir(c)
		if err != nil {
			return "", err
		}
		dir = filepath.Join(dd, "keys")
	}
	return filepath.Join(dir, transcript.SigningKeyFile), nil
}

func budgetCommand() *cli.Command {
	return &cli.Command{
		Name:  "budget",
		Usage: "the budget ledger",
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "the live budget of a thread's subtree: max, spent, reserved, remaining, children",
			ArgsUsage: "ID",
			Flags:     []cli.Flag{jsonFlag()},
			Action: func(c *cli.Context) error {
				s, rec, err := openThread(c)
				if err != nil {
					return err
				}
				defer s.Close()
				id := c.Args().First()
				b, err := s.orch.ThreadBudget(c.Context, rec)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, b)
				}
				w := c.App.Writer
				fmt.Fprintf(w, "%s  %s", id, b.Status)
				if b.LedgerID != id {
					fmt.Fprintf(w, "  (chain %s)", b.LedgerID)
				}
				fmt.Fprintf(w, "\nmax $%.6f  spent $%.6f (own $%.6f)  reserved $%.6f  remaining $%.6f\n", b.Max, b.Actual, b.Own, b.Reserved, b.Remaining)
				if b.Available < b.Remaining {
					fmt.Fprintf(w, "available now $%.6f (limited by %s)\n", b.Available, b.LimitedBy)
				}
				if b.Overrun > 0 {
					fmt.Fprintf(w, "overrun $%.6f (spend that did not fit)\n", b.Overrun)
				}
				for _, k := range b.Children {
					kind := ""
					if k.Guaranteed {
						kind = "  guaranteed"
					}
					fmt.Fprintf(w, "  ├─ %s  %s  max $%.6f  spent $%.6f%s\n", k.ThreadID, k.Status, k.Max, k.Actual, kind)
				}
				return nil
			},
		}},
	}
}

func directiveCommand() *cli.Command {
	return &cli.Command{
		Name:  "directive",
		Usage: "directives",
		Subcommands: []*cli.Command{{
			Name:      "validate",
			Usage:     "parse and validate directive files, or directives by name as thread run finds them; enqueue nothing",
			ArgsUsage: "PATH|NAME...",
			Flags:     []cli.Flag{jsonFlag()},
			Action:    directiveValidate,
		}},
	}
}
