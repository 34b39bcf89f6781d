package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// buildVersion is what the Go toolchain stamped into this binary: the
// module version and the VCS commit it was built from.
type buildVersion struct {
	// Version is the module version: a release tag, a pseudo-version
	// (v0.0.0-DATE-COMMIT, +dirty when built from a modified tree), or
	// "(devel)" when the toolchain had none.
	Version    string `json:"version"`
	Commit     string `json:"commit"`                // vcs.revision; "unknown" when not stamped (-buildvcs=false)
	CommitTime string `json:"commit_time,omitempty"` // vcs.time
	Modified   bool   `json:"modified"`              // vcs.modified: built with uncommitted changes
	Go         string `json:"go"`
}

func readBuildVersion() buildVersion {
	v := buildVersion{Version: "(devel)", Commit: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is the one line `spool version` and `spool --version` print.
func (v buildVersion) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "spool %s commit %s", v.Version, v.Commit)
	if v.CommitTime != "" {
		fmt.Fprintf(&b, " (%s)", v.CommitTime)
	}
	if v.Modified {
		b.WriteString(" modified")
	}
	if v.Go != "" {
		b.WriteString(" " + v.Go)
	}
	return b.String()
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the module version and the commit this binary was built from",
		Flags: []cli.Flag{jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			v := readBuildVersion()
			if c.Bool("json") {
				return printJSON(c.App.Writer, v)
			}
			fmt.Fprintln(c.App.Writer, v)
			return nil
		},
	}
}
