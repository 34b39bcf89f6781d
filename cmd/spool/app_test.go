package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/internal/testing/testenv"
)

// TestEveryFlagHasUsage: --help describes every flag of every command.
func TestEveryFlagHasUsage(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	var walk func(path string, flags []cli.Flag, cmds []*cli.Command)
	n := 0
	walk = func(path string, flags []cli.Flag, cmds []*cli.Command) {
		for _, f := range flags {
			n++
			if u, ok := f.(cli.DocGenerationFlag); !ok || strings.TrimSpace(u.GetUsage()) == "" {
				t.Errorf("%s --%s has no description", path, f.Names()[0])
			}
		}
		for _, c := range cmds {
			if strings.TrimSpace(c.Usage) == "" {
				t.Errorf("command %s %s has no description", path, c.Name)
			}
			walk(path+" "+c.Name, c.Flags, c.Subcommands)
		}
	}
	walk("spool", app.Flags, app.Commands)
	if n < 50 {
		t.Fatalf("walked only %d flags", n)
	}
}

// TestThreadRunHelpHasExamples: `spool thread run --help` shows example
// command lines.
func TestThreadRunHelpHasExamples(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	var out, errb bytes.Buffer
	app := newApp(&out, &errb)
	args := []string{"spool", "thread", "run", "--help"}
	if err := app.RunContext(context.Background(), reorderArgs(app, args)); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{"Examples:", "spool thread run demo/hello --embedded --wait", "--inputs-json @inputs.json",
		"--limit spend=0.5", "--model script:", "--input value", "workers hold the provider keys"} {
		if !strings.Contains(strings.ToLower(help), strings.ToLower(want)) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

func TestReorderArgs(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	cases := []struct{ in, want string }{
		// a command's flags before its arguments
		{"thread run demo/hello --wait --input name=Ada", "thread run --wait --input name=Ada -- demo/hello"},
		// global flags after the command, with and without =, valued and boolean
		{"thread run --project examples demo/hello --embedded", "--project examples thread run --embedded -- demo/hello"},
		{"thread run demo/hello --data-dir=/d --log-json --wait", "--data-dir=/d --log-json thread run --wait -- demo/hello"},
		{"thread --namespace x list --status running", "--namespace x thread list --status running"},
		{"--project p thread show ID --redis-url redis://h:1/0 --json", "--project p --redis-url redis://h:1/0 thread show --json -- ID"},
		// unknown flags stay where they were typed, for urfave/cli to refuse
		{"--bogus thread list", "--bogus thread list"},
		{"thread list --bogus", "thread list --bogus"},
		// help stays with its command
		{"thread run --help", "thread run --help"},
		{"thread --help", "thread --help"},
		// "--" ends the flags
		{"thread run -- --project", "thread run -- --project"},
		{"version --json", "version --json"},
	}
	for _, tc := range cases {
		got := strings.Join(reorderArgs(app, append([]string{"spool"}, strings.Fields(tc.in)...))[1:], " ")
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestVersionLine(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	v := buildVersion{Version: "v1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", CommitTime: "2026-01-02T03:04:05Z", Modified: true, Go: "go1.26.0"}
	want := "spool v1.2.3 commit 0123456789abcdef0123456789abcdef01234567 (2026-01-02T03:04:05Z) modified go1.26.0"
	if got := v.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := readBuildVersion(); got.Go == "" || got.Version == "" || got.Commit == "" {
		t.Errorf("readBuildVersion() = %+v", got)
	}
}

// The dev's banner suggests a directive that runs as given: the first
// that needs no input (demo/hello first), else one with placeholders for
// the inputs it requires.
func TestExampleDirective(t *testing.T) {
	dir := func(inputs string) string {
		return "# D\n\n```xml\n<directive name=\"d\" version=\"1.0.0\">\n  <metadata>\n    <description>d</description>\n" +
			"    <category>t</category>\n    <model tier=\"fast\" />\n  </metadata>\n" + inputs + "</directive>\n```\n"
	}
	needs := dir("  <inputs>\n    <input name=\"level\" type=\"integer\" required=\"true\">l</input>\n" +
		"    <input name=\"who\" type=\"string\" required=\"true\" default=\"x\">w</input>\n  </inputs>\n")
	free := dir("")
	for _, tc := range []struct {
		files  map[string]string
		name   string
		inputs []string
	}{
		{nil, "DIRECTIVE", nil},
		{map[string]string{"a/needs.md": needs, "b/free.md": free}, "b/free", nil},
		{map[string]string{"a/needs.md": needs, "c/needs.md": needs}, "a/needs", []string{"level"}},
		{map[string]string{"a/free.md": free, "demo/hello.md": free}, "demo/hello", nil},
		{map[string]string{"a/free.md": free, "demo/hello.md": needs}, "a/free", nil},
	} {
		project := t.TempDir()
		testenv.WriteFiles(t, filepath.Join(project, ".ai", "directives"), tc.files)
		name, inputs := exampleDirective(project)
		require.Equal(t, tc.name, name)
		require.Equal(t, tc.inputs, inputs)
	}
}

// An error of several lines is printed on one, its later lines kept: a
// script's yaml error says what is wrong only after its first line.
func TestOneLineKeepsEveryLine(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"  padded \n", "padded"},
		{"script \"s.yaml\": yaml: unmarshal errors:\n  line 27: field latency not found in type provider.scriptTurn",
			"script \"s.yaml\": yaml: unmarshal errors: line 27: field latency not found in type provider.scriptTurn"},
		{"a:\n  b\n\n  c", "a: b c"},
	} {
		require.Equal(t, tc.want, oneLine(tc.in))
	}
}
