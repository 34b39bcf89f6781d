package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
)

// The CLI contract (CLI.md): --json prints data, exit 0 on success, 1 on a
// failed operation, 2 on bad usage, and an error is one line on stderr.

func cliProject() map[string]string {
	return map[string]string{
		".ai/directives/t/cli.md": directive("cli", `turns="4" spend="0.5"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/greet.md": directiveWithInputs("greet", `turns="4" spend="0.5"`, fsPerms,
			`<input name="name" type="string" required="true">who</input><input name="tone" type="string" default="warm">how</input>`),
		// A tier whose script is not there: a directive of that tier is refused.
		".ai/directives/t/gone.md":     strings.Replace(directive("gone", `turns="4"`, fsPerms, `<success>done</success>`), "<limits", `<model tier="gone" /><limits`, 1),
		".ai/config/agent/models.yaml": "tiers:\n  gone: script:scripts/gone.yaml\n",
		"broken.md":                    "# not a directive\n",
		"scripts/cli.yaml":             script("cli"),
		".ai/directives/t/count.md":    directiveWithInputs("count", `turns="4"`, fsPerms, `<input name="n" type="number" required="true">how many</input>`),
		// A misspelt element: an error wherever the directive is read.
		".ai/directives/bad/misspelt.md": strings.Replace(directive("misspelt", `turns="4"`, fsPerms, `<success>done</success>`), "<limits", "<limts", 1),
		// A misspelt tool id in permissions: a warning.
		"lint/typo.md": directive("typo", `turns="4"`, `<execute><tool>rye/file-system/fs_wirte</tool></execute>`, `<success>done</success>`),
	}
}

// cliCase is one CLI invocation and what it must do.
type cliCase struct {
	name string
	// args, with {name} replaced by a saved thread id or a value of the
	// test ({ns}, {tmp}).
	args []string
	env  []string
	code int
	// errLike is a regexp the one error line on stderr must match (after
	// "spool: "); only for code != 0. That line must not say anything
	// twice in a row ("spend_exceeded: spend_exceeded:").
	errLike string
	// stderrLike is a regexp stderr must match (e.g. the --follow view).
	stderrLike string
	// check looks at stdout; nil: for failures, stdout must be empty.
	check func(t *testing.T, stdout string)
	// save stores the thread_id of the record on stdout under this name.
	save string
}

// recordKeys are the thread record's fields that CLI.md lists.
var recordKeys = []string{"thread_id", "directive", "status", "parent_id", "chain_root_id", "continuation_of",
	"continuation_thread_id", "result", "outputs", "error", "cost", "limits"}

func jsonValue(t *testing.T, stdout string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(stdout), &v), "stdout is not one JSON value:\n%s", stdout)
	return v
}

func jsonObject(t *testing.T, stdout string) map[string]any {
	t.Helper()
	m, ok := jsonValue(t, stdout).(map[string]any)
	require.True(t, ok, "stdout is not a JSON object:\n%s", stdout)
	return m
}

// listedThreads are the records `thread list --json` printed
// ({"threads": [...], "next_cursor": C}).
func listedThreads(t *testing.T, r spooltest.Result) []registry.Record {
	t.Helper()
	var page struct {
		Threads []registry.Record `json:"threads"`
	}
	r.JSON(t, &page)
	require.NotNil(t, page.Threads, "thread list --json gives threads:\n%s", r.Stdout)
	return page.Threads
}

// threadsArray is the "threads" list of thread list --json's stdout.
func threadsArray(t *testing.T, stdout string) []any {
	t.Helper()
	m, ok := jsonValue(t, stdout).(map[string]any)
	require.True(t, ok, "stdout is not a JSON object:\n%s", stdout)
	a, ok := m["threads"].([]any)
	require.True(t, ok, "no threads list:\n%s", stdout)
	return a
}

func jsonArray(t *testing.T, stdout string) []any {
	t.Helper()
	a, ok := jsonValue(t, stdout).([]any)
	require.True(t, ok, "stdout is not a JSON array:\n%s", stdout)
	return a
}

func requireKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		require.Contains(t, m, k, "JSON object lacks %q: %v", k, m)
	}
}

// requireRecord checks the shape CLI.md gives for a thread record, and
// its status.
func requireRecord(t *testing.T, v any, status string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "record is not a JSON object: %v", v)
	requireKeys(t, m, recordKeys...)
	require.Equal(t, status, m["status"], "status of %v", m["thread_id"])
	require.Equal(t, "t/cli", m["directive"])
	require.Nil(t, m["parent_id"], "a root's parent_id is null")
	require.Nil(t, m["continuation_of"])
	require.IsType(t, map[string]any{}, m["outputs"])
	cost, ok := m["cost"].(map[string]any)
	require.True(t, ok, "cost: %v", m["cost"])
	requireKeys(t, cost, "turns", "input_tokens", "output_tokens", "spend")
	limits, ok := m["limits"].(map[string]any)
	require.True(t, ok, "limits: %v", m["limits"])
	requireKeys(t, limits, "turns", "tokens", "spend", "depth", "spawns", "duration")
	require.Equal(t, 0.5, limits["spend"], "the directive's spend limit")
	if status == "completed" || status == "created" {
		require.Nil(t, m["error"])
	}
	return m
}

func isRecord(status string) func(*testing.T, string) {
	return func(t *testing.T, stdout string) { requireRecord(t, jsonValue(t, stdout), status) }
}

func TestCLI(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: cliProject()})
	run := []string{"thread", "run", "t/cli", "--model", "script:scripts/cli.yaml"}
	tmp := t.TempDir()
	// Inputs past what one command-line argument holds (128 KiB).
	big := strings.Repeat("ada ", 50<<10)
	b, err := json.Marshal(map[string]any{"name": big})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "big.json"), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "bad.json"), []byte("hello\n"), 0o644))
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	const missing = "no-such-thread-1"
	notFound := `^thread "` + missing + `" not found in \S+, namespace \S+$`

	// In order: the --embedded runs (an in-process worker) come before the
	// threads that must stay pending, which any worker of this namespace
	// would run.
	cases := []cliCase{
		// thread run
		{name: "run embedded wait json", args: with(run, "--input", "name=ada", "--embedded", "--wait", "--json"), save: "done",
			check: func(t *testing.T, out string) {
				m := requireRecord(t, jsonValue(t, out), "completed")
				require.Equal(t, "done for ada", m["result"])
				require.Equal(t, m["thread_id"], m["chain_root_id"])
				require.EqualValues(t, 3, m["cost"].(map[string]any)["turns"])
			}},
		{name: "run follow shows a live view", args: with(run, "--inputs-json", `{"name":"bo"}`, "--embedded", "--follow", "--json"), save: "done2",
			check:      isRecord("completed"),
			stderrLike: `(?m)^\[t/cli-\S+\] completed +turn 3/4 · 255 tokens · \$0\.000435 of \$0\.5 · last tool rye/file-system/fs_read$`},
		{name: "run thread fails", args: with(run, "--input", "name=x", "--limit", "turns=1", "--embedded", "--wait", "--json"), save: "failed",
			code: 1, errLike: `^thread t/cli-\S+ ended error: turns_exceeded: `,
			check: func(t *testing.T, out string) {
				m := requireRecord(t, jsonValue(t, out), "error")
				errObj, ok := m["error"].(map[string]any)
				require.True(t, ok, "error: %v", m["error"])
				require.Equal(t, "turns_exceeded", errObj["code"])
				require.NotEmpty(t, errObj["message"])
			}},
		{name: "run input with a comma", args: with(run, "--input", "name=ada, bo", "--namespace", "{ns}-comma", "--embedded", "--wait", "--json"), // a namespace of its own: the listings below count this one's runs
			check: func(t *testing.T, out string) {
				m := requireRecord(t, jsonValue(t, out), "completed")
				require.Equal(t, "done for ada, bo", m["result"], "a comma is part of an --input's value")
			}},
		{name: "run inputs json from a file", args: with(run, "--inputs-json", "@{tmp}/big.json", "--embedded", "--wait", "--json"),
			check: func(t *testing.T, out string) {
				m := requireRecord(t, jsonValue(t, out), "completed")
				require.True(t, m["result"] == "done for "+big, "the whole input reached the thread")
			}},
		{name: "run with a global flag after the command", args: with(run, "--input", "name=g", "--namespace", "{ns}", "--embedded", "--wait", "--json"),
			env: []string{"SPOOL_NAMESPACE=other-ns"}, save: "global",
			check: isRecord("completed")},
		{name: "run no wait json", args: with(run, "--inputs-json", `{"name":"pending"}`, "--json"), save: "pending",
			check: func(t *testing.T, out string) {
				m := requireRecord(t, jsonValue(t, out), "created")
				require.Equal(t, map[string]any{"name": "pending"}, m["inputs"])
			}},
		{name: "run no wait text", args: with(run, "--input", "name=p2"), save: "pending2",
			check: func(t *testing.T, out string) { require.Regexp(t, `^t/cli-\S+\n$`, out) }},
		{name: "run unknown directive", args: []string{"thread", "run", "no/such", "--json"}, code: 1, errLike: `no/such.*not found`},
		{name: "run misspelt element", args: []string{"thread", "run", "bad/misspelt", "--json"}, code: 1,
			errLike: `^project:\.ai/directives/bad/misspelt\.md:\d+: unknown element <limts> in <metadata> \(did you mean <limits>\?\)$`},
		{name: "run malformed inputs json", args: with(run, "--inputs-json", `{"name":`), code: 2, errLike: `^--inputs-json: not a JSON object`},
		{name: "run inputs json array", args: with(run, "--inputs-json", `["a"]`), code: 2, errLike: `^--inputs-json: not a JSON object`},
		{name: "run inputs json null", args: with(run, "--inputs-json", `null`, "--input", "a=b"), code: 2, errLike: `^--inputs-json: not a JSON object: null$`},
		{name: "run input without value", args: with(run, "--input", "name"), code: 2, errLike: `^--input "name": want key=value$`},
		{name: "run unknown limit", args: with(run, "--limit", "bogus=1"), code: 2, errLike: `^--limit bogus=1: unknown limit`},
		{name: "run bad timeout", args: with(run, "--timeout", "soon"), code: 2, errLike: `^invalid value "soon" for flag -timeout`},
		{name: "run bad flag", args: with(run, "--bogus"), code: 2, errLike: `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
		{name: "run missing directive", args: []string{"thread", "run", "--json"}, code: 2, errLike: `^thread run takes one DIRECTIVE argument$`},
		{name: "run two directives", args: []string{"thread", "run", "t/cli", "t/cli"}, code: 2, errLike: `^thread run takes one DIRECTIVE argument$`},
		{name: "run undeclared input", args: []string{"thread", "run", "t/greet", "--input", "nmae=Ada", "--model", "script:scripts/cli.yaml"}, code: 2,
			errLike: `^directive t/greet: input "nmae" is not declared \(declared: name, tone\)$`},
		{name: "run undeclared inputs json", args: []string{"thread", "run", "t/greet", "--inputs-json", `{"name":"a","tnoe":"b","x":1}`}, code: 2,
			errLike: `^directive t/greet: inputs "tnoe", "x" are not declared \(declared: name, tone\)$`},
		{name: "run missing required input", args: []string{"thread", "run", "t/greet", "--input", "tone=dry", "--model", "script:scripts/cli.yaml"}, code: 2,
			errLike: `^directive t/greet: input "name": required input missing$`},
		// --inputs-json's numbers are checked as --input's text is.
		{name: "run inputs json number out of range", args: []string{"thread", "run", "t/count", "--inputs-json", `{"n":1e400}`}, code: 2,
			errLike: `^directive t/count: input "n": want a number, got 1e400$`},
		{name: "run input number out of range", args: []string{"thread", "run", "t/count", "--input", "n=1e400"}, code: 2,
			errLike: `^directive t/count: input "n": want a number, got "1e400"$`},
		{name: "run mistyped input", args: []string{"thread", "run", "t/greet", "--inputs-json", `{"name":{"a":1}}`}, code: 2,
			errLike: `^directive t/greet: input "name": want a string, got an object$`},
		{name: "run unknown model", args: []string{"thread", "run", "t/cli", "--model", "gpt-9-ultra"}, code: 2,
			errLike: `^unknown model "gpt-9-ultra": add it to \.ai/config/agent/pricing\.yaml$`},
		{name: "run model of no provider", args: []string{"thread", "run", "t/cli", "--model", "cluade-sonnet-4-5"}, code: 2,
			errLike: `^unknown model "cluade-sonnet-4-5": use claude-\*, gpt-\*`},
		{name: "run missing script", args: []string{"thread", "run", "t/cli", "--model", "script:nosuch.yaml"}, code: 2,
			errLike: `^model script:nosuch\.yaml: stat .*nosuch\.yaml: no such file or directory$`},
		{name: "run tier script missing", args: []string{"thread", "run", "t/gone"}, env: []string{"SPOOL_LOG_LEVEL=warn"}, code: 2,
			errLike: `^directive t/gone: script "scripts/gone\.yaml": read scripts/gone\.yaml: file does not exist$`},
		{name: "run script is a directory", args: []string{"thread", "run", "t/cli", "--model", "script:scripts"}, code: 2,
			errLike: `^model script:scripts: .*scripts is a directory, not a script$`},
		{name: "run spend past the ledger", args: with(run, "--limit", "spend=1e308"), code: 2,
			errLike: `^--limit spend=1e308: at most 1e\+06 USD \(the most one budget holds\)$`},
		{name: "run negative timeout", args: with(run, "--wait", "--timeout", "-1s"), code: 2,
			errLike: `^--timeout -1s: must not be negative \(0 waits without a limit\)$`},
		{name: "run inputs from a missing file", args: with(run, "--inputs-json", "@{tmp}/nope.json"), code: 2,
			errLike: `^--inputs-json @.*/nope\.json: no such file or directory$`},
		{name: "run inputs file not json", args: with(run, "--inputs-json", "@{tmp}/bad.json"), code: 2,
			errLike: `^--inputs-json: not a JSON object: invalid character 'h' looking for beginning of value$`},

		// thread list
		{name: "list json", args: []string{"thread", "list", "--json"}, check: func(t *testing.T, out string) {
			a := threadsArray(t, out)
			require.Len(t, a, 7)
			for _, r := range a {
				requireRecord(t, r, r.(map[string]any)["status"].(string))
			}
		}},
		{name: "list past its limit", args: []string{"thread", "list", "--limit", "2", "--json"},
			stderrLike: `^spool: showing the newest 2 threads, the limit; there are more: the next page is --cursor \S+ \(or raise --limit, 0 lists all\)\n$`,
			check: func(t *testing.T, out string) {
				require.Len(t, threadsArray(t, out), 2)
				require.NotEmpty(t, jsonValue(t, out).(map[string]any)["next_cursor"])
			}},
		{name: "list at its limit", args: []string{"thread", "list", "--limit", "7", "--json"}, stderrLike: `^$`,
			check: func(t *testing.T, out string) {
				require.Len(t, threadsArray(t, out), 7)
				require.NotContains(t, jsonValue(t, out).(map[string]any), "next_cursor", "the last page has none")
			}},
		{name: "list by status", args: []string{"thread", "list", "--status", "completed", "--directive", "t/cli", "--json"}, check: func(t *testing.T, out string) {
			a := threadsArray(t, out)
			require.Len(t, a, 4)
			for _, r := range a {
				requireRecord(t, r, "completed")
			}
		}},
		{name: "list none", args: []string{"thread", "list", "--directive", "no/such", "--json"}, check: func(t *testing.T, out string) {
			require.Empty(t, threadsArray(t, out))
		}},
		{name: "list children", args: []string{"thread", "list", "--parent", "{done}", "--json"}, check: func(t *testing.T, out string) {
			require.Empty(t, threadsArray(t, out), "a thread without children")
		}},
		{name: "list unknown parent", args: []string{"thread", "list", "--parent", missing, "--json"}, code: 1, errLike: notFound},
		{name: "list unknown status", args: []string{"thread", "list", "--status", "bogus"}, code: 2, errLike: `^--status "bogus": want one of`},
		{name: "list argument", args: []string{"thread", "list", "x"}, code: 2, errLike: `^thread list takes no arguments`},
		{name: "list bad flag", args: []string{"thread", "list", "--bogus"}, code: 2, errLike: `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},

		// thread show
		{name: "show json", args: []string{"thread", "show", "{done}", "--json"}, check: isRecord("completed")},
		{name: "show failed json", args: []string{"thread", "show", "{failed}", "--json"}, check: isRecord("error")},
		{name: "show text", args: []string{"thread", "show", "{done}"}, check: func(t *testing.T, out string) {
			require.Regexp(t, `(?m)^status +completed$`, out)
			require.Regexp(t, `(?m)^result +done for ada$`, out)
		}},
		{name: "show unknown", args: []string{"thread", "show", missing, "--json"}, code: 1, errLike: notFound},
		{name: "show missing id", args: []string{"thread", "show", "--json"}, code: 2, errLike: `^thread show takes one thread ID`},
		{name: "show two ids", args: []string{"thread", "show", "{done}", "{failed}"}, code: 2, errLike: `^thread show takes one thread ID`},
		{name: "show bad flag", args: []string{"thread", "show", "{done}", "--bogus"}, code: 2, errLike: `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},

		// thread tree
		{name: "tree json", args: []string{"thread", "tree", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "thread_id", "directive", "status", "spend", "turns", "children")
			require.Equal(t, "completed", m["status"])
			require.Equal(t, []any{}, m["children"])
		}},
		{name: "tree unknown", args: []string{"thread", "tree", missing, "--json"}, code: 1, errLike: notFound},
		{name: "tree missing id", args: []string{"thread", "tree"}, code: 2, errLike: `^thread tree takes one thread ID`},

		// thread chain
		{name: "chain json", args: []string{"thread", "chain", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "success", "chain_length", "chain")
			require.EqualValues(t, 1, m["chain_length"])
			chain := m["chain"].([]any)
			require.Len(t, chain, 1)
			requireRecord(t, chain[0], "completed")
		}},
		{name: "chain unknown", args: []string{"thread", "chain", missing, "--json"}, code: 1, errLike: notFound},
		{name: "chain missing id", args: []string{"thread", "chain"}, code: 2, errLike: `^thread chain takes one thread ID`},

		// thread wait
		{name: "wait json", args: []string{"thread", "wait", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			require.Len(t, m, 1)
			for _, r := range m {
				requireRecord(t, r, "completed")
			}
		}},
		{name: "wait text", args: []string{"thread", "wait", "{done}"}, check: func(t *testing.T, out string) {
			require.Regexp(t, `^t/cli-\S+  →  t/cli-\S+  completed\n$`, out, "three columns, which scripts read (deploy/fleet.sh)")
		}},
		{name: "wait for a failed thread", args: []string{"thread", "wait", "{done}", "{failed}", "--json"}, code: 1,
			errLike: `^1 of 2 threads did not complete$`, check: func(t *testing.T, out string) {
				m := jsonObject(t, out)
				require.Len(t, m, 2, "the records are printed even though one failed")
			}},
		{name: "wait times out", args: []string{"thread", "wait", "{pending}", "--timeout", "1s"}, code: 1,
			errLike: `^thread t/cli-\S+ not finished after --timeout 1s$`},
		{name: "wait times out naming the unfinished", args: []string{"thread", "wait", "{done}", "{pending}", "{failed}", "--timeout", "1s"}, code: 1,
			errLike: `^1 of 3 threads not finished after --timeout 1s: t/cli-\S+$`},
		{name: "wait negative timeout", args: []string{"thread", "wait", "{pending}", "--timeout", "-1s"}, code: 2,
			errLike: `^--timeout -1s: must not be negative \(0 waits without a limit\)$`},
		{name: "wait with a global flag after the ids", args: []string{"thread", "wait", "{global}", "--namespace", "{ns}", "--json"},
			env: []string{"SPOOL_NAMESPACE=other-ns"}, check: func(t *testing.T, out string) {
				for _, r := range jsonObject(t, out) {
					requireRecord(t, r, "completed")
				}
			}},
		{name: "wait unknown", args: []string{"thread", "wait", "{done}", missing}, code: 1, errLike: notFound},
		{name: "wait missing id", args: []string{"thread", "wait", "--json"}, code: 2, errLike: `^thread wait takes one or more thread IDs$`},
		{name: "wait bad timeout", args: []string{"thread", "wait", "{done}", "--timeout", "x"}, code: 2, errLike: `^invalid value "x" for flag -timeout`},

		// thread transcript
		{name: "transcript jsonl", args: []string{"thread", "transcript", "{done}", "--format", "jsonl"}, check: requireJSONL},
		{name: "transcript json", args: []string{"thread", "transcript", "{done}", "--json"}, check: requireJSONL},
		{name: "transcript text", args: []string{"thread", "transcript", "{done}"}, check: func(t *testing.T, out string) {
			require.Contains(t, out, "rye/file-system/fs_write")
		}},
		{name: "transcript markdown follow", args: []string{"thread", "transcript", "{done}", "--format", "markdown", "--follow"}, check: func(t *testing.T, out string) {
			require.True(t, strings.HasPrefix(out, "```yaml\n"), "the markdown document, not the text view:\n%s", out)
			require.Contains(t, out, "status: \"completed\"")
			require.Contains(t, out, "### Response — Turn 3")
		}},
		{name: "transcript unknown format", args: []string{"thread", "transcript", "{done}", "--format", "xml"}, code: 2, errLike: `^--format "xml": want jsonl, text or markdown$`},
		{name: "transcript json and text", args: []string{"thread", "transcript", "{done}", "--json", "--format", "text"}, code: 2, errLike: `^--json prints jsonl`},
		{name: "transcript unknown", args: []string{"thread", "transcript", missing}, code: 1, errLike: notFound},
		{name: "transcript missing id", args: []string{"thread", "transcript"}, code: 2, errLike: `^thread transcript takes one thread ID`},

		// thread search
		{name: "search json", args: []string{"thread", "search", "{done}", "--query", `wrote \d+ bytes`, "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "success", "matches")
			matches := m["matches"].([]any)
			require.NotEmpty(t, matches)
			for _, x := range matches {
				mm := x.(map[string]any)
				requireKeys(t, mm, "thread_id", "seq", "event_type", "line", "text")
				require.Regexp(t, `wrote \d+ bytes`, mm["text"])
			}
		}},
		{name: "search no match", args: []string{"thread", "search", "{done}", "--query", "zzz-nothing", "--json"}, check: func(t *testing.T, out string) {
			require.Equal(t, []any{}, jsonObject(t, out)["matches"])
		}},
		{name: "search bad regexp", args: []string{"thread", "search", "{done}", "--query", "(", "--json"}, code: 2, errLike: `^--query: error parsing regexp`},
		{name: "search missing query", args: []string{"thread", "search", "{done}"}, code: 2, errLike: `^thread search needs --query REGEX$`},
		{name: "search unknown", args: []string{"thread", "search", missing, "--query", "x"}, code: 1, errLike: notFound},
		{name: "search missing id", args: []string{"thread", "search", "--query", "x"}, code: 2, errLike: `^thread search takes one thread ID`},

		// thread verify
		{name: "verify json", args: []string{"thread", "verify", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "thread_id", "verified", "segments", "events")
			require.Equal(t, true, m["verified"])
			require.EqualValues(t, 3, m["segments"])
		}},
		{name: "verify unknown", args: []string{"thread", "verify", missing, "--json"}, code: 1, errLike: notFound},
		{name: "verify missing id", args: []string{"thread", "verify"}, code: 2, errLike: `^thread verify takes one thread ID`},

		// budget show
		{name: "budget json", args: []string{"budget", "show", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "thread_id", "parent_id", "max", "reserved", "actual", "remaining", "status", "children")
			require.Nil(t, m["parent_id"])
			require.Equal(t, 0.5, m["max"])
			require.InDelta(t, 0.000435, m["actual"], 1e-12)
			require.Equal(t, []any{}, m["children"])
		}},
		{name: "budget unknown", args: []string{"budget", "show", missing, "--json"}, code: 1, errLike: notFound},
		{name: "budget missing id", args: []string{"budget", "show"}, code: 2, errLike: `^budget show takes one thread ID`},

		// thread cancel
		{name: "cancel pending", args: []string{"thread", "cancel", "{pending2}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "success", "thread_id", "status", "cancel_requested")
			require.Equal(t, "cancelled", m["status"])
			require.Equal(t, true, m["cancel_requested"])
		}},
		{name: "cancel finished", args: []string{"thread", "cancel", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			require.Equal(t, "completed", m["status"])
			require.Equal(t, false, m["cancel_requested"], "nothing to cancel")
		}},
		{name: "cancel unknown", args: []string{"thread", "cancel", missing}, code: 1, errLike: notFound},
		{name: "cancel missing id", args: []string{"thread", "cancel"}, code: 2, errLike: `^thread cancel takes one thread ID`},
		{name: "cancel bad flag value", args: []string{"thread", "cancel", "{done}", "--cascade=maybe"}, code: 2, errLike: `^invalid boolean value "maybe"`},

		// people in the loop: an unknown thread is not found, as for every command
		{name: "approve unknown", args: []string{"thread", "approve", missing}, code: 1, errLike: notFound},
		{name: "deny unknown", args: []string{"thread", "deny", missing, "--reason", "no"}, code: 1, errLike: notFound},

		// history: fork (refusals only: a fork would change the counts
		// below), export-script, replay
		{name: "fork missing turn", args: []string{"thread", "fork", "{done}"}, code: 2, errLike: `^thread fork needs --at-turn N$`},
		{name: "fork turn 0", args: []string{"thread", "fork", "{done}", "--at-turn", "0"}, code: 2, errLike: `^--at-turn 0: turns count from 1$`},
		{name: "fork past the turns", args: []string{"thread", "fork", "{done}", "--at-turn", "9", "--json"}, code: 2,
			errLike: `recorded 3 model turns: there is no turn 9 to fork at$`},
		{name: "fork unknown", args: []string{"thread", "fork", missing, "--at-turn", "1"}, code: 1, errLike: notFound},
		{name: "fork missing id", args: []string{"thread", "fork", "--at-turn", "1"}, code: 2, errLike: `^thread fork takes one thread ID`},
		{name: "fork unknown model", args: []string{"thread", "fork", "{done}", "--at-turn", "1", "--model", "gpt-9-ultra"}, code: 2,
			errLike: `^unknown model "gpt-9-ultra": add it to \.ai/config/agent/pricing\.yaml$`},
		{name: "fork script outside", args: []string{"thread", "fork", "{done}", "--at-turn", "1", "--model", "script:../x.yaml"}, code: 2,
			errLike: `outside`},
		{name: "export-script", args: []string{"thread", "export-script", "{done}"}, check: func(t *testing.T, out string) {
			require.Contains(t, out, "t/cli:")
			require.Equal(t, 3, strings.Count(out, "usage:"), out)
		}},
		{name: "export-script json", args: []string{"thread", "export-script", "{done}", "--json"}, check: func(t *testing.T, out string) {
			turns, ok := jsonObject(t, out)["directives"].(map[string]any)["t/cli"].([]any)
			require.True(t, ok, "the script as a JSON object: %s", out)
			require.Len(t, turns, 3)
		}},
		{name: "export-script unknown", args: []string{"thread", "export-script", missing}, code: 1, errLike: notFound},
		{name: "replay json", args: []string{"thread", "replay", "{done}", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "match", "thread_id", "model", "threads", "turns", "recorded_threads", "recorded_turns", "status")
			require.Equal(t, true, m["match"])
			require.Equal(t, 3.0, m["turns"])
		}},
		{name: "replay unknown", args: []string{"thread", "replay", missing}, code: 1, errLike: notFound},
		{name: "replay bad timeout", args: []string{"thread", "replay", "{done}", "--timeout", "-1s"}, code: 2, errLike: `^--timeout -1s: must be positive$`},

		// thread resume (last: it continues done2's chain)
		{name: "resume json", args: []string{"thread", "resume", "{done2}", "--message", "one more", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "success", "resumed", "new_thread_id", "resolved_thread_id", "reconstructed_turns", "new_thread_result")
			require.Equal(t, true, m["resumed"])
			require.NotEqual(t, m["resolved_thread_id"], m["new_thread_id"])
		}},
		{name: "resume unknown", args: []string{"thread", "resume", missing, "--message", "hi"}, code: 1, errLike: notFound},
		{name: "resume missing message", args: []string{"thread", "resume", "{done}"}, code: 2, errLike: `^thread resume needs --message TEXT$`},
		{name: "resume missing id", args: []string{"thread", "resume", "--message", "hi"}, code: 2, errLike: `^thread resume takes one thread ID`},

		// directive validate
		{name: "validate json", args: []string{"directive", "validate", ".ai/directives/t/cli.md", ".ai/directives/t", "--json"}, check: func(t *testing.T, out string) {
			a := jsonArray(t, out)
			require.Len(t, a, 2)
			for _, x := range a {
				m := x.(map[string]any)
				requireKeys(t, m, "path", "valid")
				require.Equal(t, true, m["valid"], "%v", m)
			}
		}},
		{name: "validate invalid", args: []string{"directive", "validate", ".ai/directives/t/cli.md", "broken.md", "--json"}, code: 1,
			errLike: `^1 of 2 directives invalid$`, check: func(t *testing.T, out string) {
				a := jsonArray(t, out)
				require.Len(t, a, 2)
				require.Equal(t, true, a[0].(map[string]any)["valid"])
				bad := a[1].(map[string]any)
				require.Equal(t, "broken.md", bad["path"])
				require.Equal(t, false, bad["valid"])
				require.Contains(t, bad["error"], "broken.md")
			}},
		{name: "validate missing file", args: []string{"directive", "validate", "nope.md"}, code: 1, errLike: `^1 of 1 directive invalid$`,
			check: func(t *testing.T, out string) { require.Contains(t, out, "FAIL nope.md") }},
		{name: "validate no path", args: []string{"directive", "validate", "--json"}, code: 2, errLike: `^directive validate takes one or more paths or directive names$`},
		{name: "validate by name", args: []string{"directive", "validate", "t/cli", "t/greet.md"}, check: func(t *testing.T, out string) {
			require.Equal(t, "ok   t/cli\nok   t/greet.md\n", out)
		}},
		{name: "validate unknown name", args: []string{"directive", "validate", "no/such"}, code: 1, errLike: `^1 of 1 directive invalid$`, check: func(t *testing.T, out string) {
			require.Regexp(t, `^FAIL no/such: no such file, and no directive no/such in \S+/\.ai/directives, ~/\.ai/directives or the built-in directives\n$`, out)
		}},
		{name: "validate misspelt element", args: []string{"directive", "validate", "bad/misspelt"}, code: 1, errLike: `^1 of 1 directive invalid$`, check: func(t *testing.T, out string) {
			require.Regexp(t, `^FAIL project:\.ai/directives/bad/misspelt\.md:\d+: unknown element <limts> in <metadata> \(did you mean <limits>\?\)\n$`, out)
		}},
		{name: "validate warns of an unknown tool", args: []string{"directive", "validate", "lint/typo.md", "--json"}, check: func(t *testing.T, out string) {
			a := jsonArray(t, out)
			require.Len(t, a, 1)
			m := a[0].(map[string]any)
			require.Equal(t, true, m["valid"], "a warning is no error: %v", m)
			require.Equal(t, []any{"lint/typo.md: <permissions>: rye.execute.tool.rye.file-system.fs_wirte names no known tool (did you mean rye/file-system/fs_write?)"}, m["warnings"])
		}},
		{name: "validate warns in text", args: []string{"directive", "validate", "lint/typo.md"}, check: func(t *testing.T, out string) {
			require.Equal(t, "ok   lint/typo.md\nwarn lint/typo.md: <permissions>: rye.execute.tool.rye.file-system.fs_wirte names no known tool (did you mean rye/file-system/fs_write?)\n", out)
		}},

		// keys init
		{name: "keys init json", args: []string{"keys", "init", "--dir", "{tmp}/keys", "--json"}, check: requireKeyInit(true)},
		{name: "keys init again", args: []string{"keys", "init", "--dir", "{tmp}/keys", "--json"}, check: requireKeyInit(false)},
		{name: "keys init at the signing key", args: []string{"keys", "init", "--signing-key", "{tmp}/sk/my.key", "--json"}, check: func(t *testing.T, out string) {
			requireKeyInit(true)(t, out)
			require.Equal(t, "my.key", filepath.Base(jsonObject(t, out)["private_key"].(string)), "SPOOL_SIGNING_KEY names the key other commands load")
		}},
		{name: "keys init argument", args: []string{"keys", "init", "x"}, code: 2, errLike: `^keys init takes no arguments`},
		{name: "keys init bad flag", args: []string{"keys", "init", "--bogus"}, code: 2, errLike: `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},

		// commands, global flags and the environment
		{name: "unknown command", args: []string{"bogus"}, code: 2, errLike: `^unknown command "bogus" \(spool [a-z ]*--help lists the commands\)$`},
		{name: "global flags after the command", args: []string{"thread", "list", "--status", "completed", "--namespace", "{ns}", "--log-level", "error", "--json"},
			env: []string{"SPOOL_NAMESPACE=other-ns"}, check: func(t *testing.T, out string) {
				require.Equal(t, 3, len(threadsArray(t, out)), "done, big and global (done2 was resumed: continued)")
			}},
		{name: "global flag between commands", args: []string{"thread", "--namespace", "{ns}", "show", "{done}", "--json"},
			env: []string{"SPOOL_NAMESPACE=other-ns"}, check: isRecord("completed")},
		{name: "version", args: []string{"version"}, check: func(t *testing.T, out string) {
			require.Regexp(t, `^spool \S+ commit \S+.* go1\.\d+`, out)
		}},
		{name: "version flag", args: []string{"--version"}, check: func(t *testing.T, out string) {
			require.Regexp(t, `^spool \S+ commit \S+.* go1\.\d+`, out)
		}},
		{name: "version json", args: []string{"version", "--json"}, check: func(t *testing.T, out string) {
			m := jsonObject(t, out)
			requireKeys(t, m, "version", "commit", "modified", "go")
			require.NotEmpty(t, m["version"])
			require.NotEmpty(t, m["commit"])
		}},
		{name: "version argument", args: []string{"version", "x"}, code: 2, errLike: `^version takes no arguments`},
		{name: "thread run help", args: []string{"thread", "run", "--help"}, check: func(t *testing.T, out string) {
			require.Contains(t, out, "Examples:")
			require.Contains(t, out, "spool thread run demo/hello --embedded --wait")
			require.Regexp(t, `--inputs-json value +inputs as a JSON object, or @FILE`, out)
		}},
		{name: "thread list help", args: []string{"thread", "list", "--help"}, check: func(t *testing.T, out string) {
			require.Regexp(t, `--status value +only threads in this status`, out)
		}},
		{name: "unknown subcommand", args: []string{"thread", "bogus"}, code: 2, errLike: `^unknown command "bogus" \(spool [a-z ]*--help lists the commands\)$`},
		{name: "bad global flag", args: []string{"--bogus", "thread", "list"}, code: 2, errLike: `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
		// A likely misspelling is told the name it misspells.
		{name: "misspelt command", args: []string{"thred", "list"}, code: 2, errLike: `^unknown command "thred" \(did you mean thread\?\)$`},
		{name: "misspelt subcommand", args: []string{"thread", "lst"}, code: 2, errLike: `^unknown command "lst" \(did you mean thread list\?\)$`},
		{name: "misspelt flag", args: []string{"thread", "list", "--stauts", "completed"}, code: 2, errLike: `^flag provided but not defined: -stauts \(did you mean --status\?\)$`},
		{name: "misspelt global flag", args: []string{"--redis-ur", "x", "thread", "list"}, code: 2, errLike: `^flag provided but not defined: -redis-ur \(did you mean --redis-url\?\)$`},
		{name: "bad env value", args: []string{"thread", "list"}, env: []string{"SPOOL_LEASE_TTL=soon"}, code: 2, errLike: `SPOOL_LEASE_TTL`},
		{name: "bad S3 env value", args: []string{"thread", "list"}, env: []string{"SPOOL_S3_BUCKET=b", "SPOOL_S3_PATH_STYLE=maybe"}, code: 2,
			errLike: `^SPOOL_S3_PATH_STYLE="maybe": want true or false$`},
		{name: "S3 endpoint without a bucket", args: []string{"thread", "list"}, env: []string{"SPOOL_S3_BUCKET=", "SPOOL_S3_ENDPOINT=http://127.0.0.1:9"}, code: 2,
			errLike: `^SPOOL_S3_ENDPOINT is set but SPOOL_S3_BUCKET is not: set the bucket, or unset SPOOL_S3_ENDPOINT for the local store$`},
		{name: "bad log level", args: []string{"thread", "list", "--log-level", "bogus"}, code: 2, errLike: `^--log-level "bogus": want debug, info, warn or error$`},
		{name: "malformed redis url", args: []string{"thread", "list"}, env: []string{"SPOOL_REDIS_URL=bogus://x"}, code: 2,
			errLike: `^redis url "bogus://x": scheme must be redis, rediss, redis-sentinel or redis-cluster$`},
		{name: "project not there", args: []string{"--project", "{tmp}/nope", "thread", "list"}, env: []string{"SPOOL_DATA_DIR="}, code: 2,
			errLike: `^--project .*/nope: not a directory$`, check: func(t *testing.T, out string) {
				require.Empty(t, out)
				require.NoDirExists(t, filepath.Join(tmp, "nope"), "no data dir made under a mistyped project")
			}},
		{name: "run in a project not there", args: []string{"--project", "{tmp}/nope", "thread", "run", "t/cli"}, code: 2, errLike: `^--project .*/nope: not a directory$`},
		{name: "project not needed with a data dir", args: []string{"--project", "{tmp}/nope", "thread", "show", "{done}", "--json"},
			check: isRecord("completed")}, // as a worker's SPOOL_PROJECT in deploy/, which mounts no project
		{name: "lease ttl too short", args: []string{"--lease-ttl", "10ms", "thread", "list"}, code: 2, errLike: `^--lease-ttl 10ms: must be at least 1s$`},
		{name: "env namespace is used", args: []string{"thread", "show", "{done}"}, env: []string{"SPOOL_NAMESPACE=other-ns"}, code: 1, errLike: `^thread "t/cli-\S+" not found in \S+, namespace other-ns$`},
		{name: "flag wins over env", args: []string{"--namespace", "{ns}", "thread", "show", "{done}", "--json"}, env: []string{"SPOOL_NAMESPACE=other-ns"},
			check: isRecord("completed")},
		{name: "a tool process starts no embedded Redis", args: []string{"--data-dir", "{tmp}/tool", "thread", "list"},
			env: []string{"SPOOL_REDIS_URL=", "SPOOL_SPAWN_SOCKET=/nonexistent.sock", "SPOOL_SPAWN_TOKEN=t"}, code: 1, errLike: "^no Redis: ",
			check: func(t *testing.T, out string) {
				require.Empty(t, out)
				require.NoDirExists(t, filepath.Join(tmp, "tool", "redis"), "a workspace is no data dir")
			}},
		{name: "redis down", args: []string{"thread", "list"}, env: []string{"SPOOL_REDIS_URL=redis://u:secret@127.0.0.1:1/0"}, code: 1,
			errLike: `^redis redis://u:xxxxx@127\.0\.0\.1:1/0: .*connection refused`},
	}

	vals := map[string]string{"ns": e.Namespace, "tmp": tmp}
	placeholder := regexp.MustCompile(`\{(\w+)\}`)
	for _, tc := range cases {
		ok := t.Run(tc.name, func(t *testing.T) {
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = placeholder.ReplaceAllStringFunc(a, func(m string) string {
					v, ok := vals[m[1:len(m)-1]]
					require.True(t, ok, "no value for %s (an earlier case failed?)", m)
					return v
				})
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			res := e.SpoolContext(ctx, append(quietEnv(), tc.env...), args...)
			require.Equal(t, tc.code, res.Code, "spool %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.Stdout, res.Stderr)
			requireNoTrace(t, res.Stderr)
			if tc.code != 0 {
				require.Equal(t, 1, strings.Count(res.Stderr, "\n"), "one line on stderr:\n%s", res.Stderr)
				require.True(t, strings.HasPrefix(res.Stderr, "spool: "), "stderr: %s", res.Stderr)
				line := strings.TrimSuffix(strings.TrimPrefix(res.Stderr, "spool: "), "\n")
				require.Regexp(t, tc.errLike, line)
				requireReadsOnce(t, line)
			}
			if tc.stderrLike != "" {
				require.Regexp(t, tc.stderrLike, res.Stderr)
			}
			if tc.check != nil {
				tc.check(t, res.Stdout)
			} else if tc.code != 0 {
				require.Empty(t, res.Stdout, "a failure prints nothing on stdout (no help text)")
			}
			if tc.save != "" {
				id := strings.TrimSpace(res.Stdout)
				if strings.HasPrefix(id, "{") {
					id, _ = jsonObject(t, res.Stdout)["thread_id"].(string)
				}
				require.NotEmpty(t, id)
				vals[tc.save] = id
			}
		})
		if !ok && tc.save != "" {
			t.Fatalf("case %q failed; later cases need its thread", tc.name)
		}
	}
}

// quietEnv is the environment of the commands whose stderr is checked: no
// logs beside the error line, and a -race binary that does not sleep a
// second before exiting 0 (the race detector's atexit_sleep_ms).
func quietEnv() []string {
	env := []string{"SPOOL_LOG_LEVEL=error"}
	if os.Getenv("GORACE") == "" {
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return env
}

// requireReadsOnce fails when an error line says something twice in a
// row: "spend_exceeded: spend_exceeded: ...", "provider_transient:
// provider transient: ...".
func requireReadsOnce(t *testing.T, line string) {
	t.Helper()
	parts := strings.Split(line, ": ")
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "_", " ")) }
	for i := 1; i < len(parts); i++ {
		require.NotEqual(t, norm(parts[i-1]), norm(parts[i]), "%q repeats itself", line)
	}
}

// requireNoTrace fails on a Go panic or urfave/cli's help text in stderr.
func requireNoTrace(t *testing.T, stderr string) {
	t.Helper()
	for _, s := range []string{"panic:", "goroutine ", "Incorrect Usage", "USAGE:"} {
		require.NotContains(t, stderr, s)
	}
}

// requireJSONL checks that every line of stdout is a transcript event.
func requireJSONL(t *testing.T, stdout string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		m := jsonObject(t, sc.Text())
		requireKeys(t, m, "timestamp", "thread_id", "seq", "event_type", "payload")
		n++
	}
	require.NoError(t, sc.Err())
	require.Greater(t, n, 3)
}

func requireKeyInit(created bool) func(*testing.T, string) {
	return func(t *testing.T, stdout string) {
		m := jsonObject(t, stdout)
		requireKeys(t, m, "key_id", "created", "private_key", "public_key")
		require.Equal(t, created, m["created"])
		require.FileExists(t, m["private_key"].(string))
		require.FileExists(t, m["public_key"].(string))
		require.Equal(t, filepath.Dir(m["private_key"].(string)), filepath.Dir(m["public_key"].(string)))
	}
}

// TestCLIServers checks the long-running commands: bad usage exits 2
// before anything starts, and SIGTERM stops a started one with exit 0.
func TestCLIServers(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: cliProject()})

	bad := []struct {
		args    []string
		code    int
		errLike string
	}{
		{[]string{"worker", "--bogus"}, 2, `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
		{[]string{"worker", "extra"}, 2, `^worker takes no arguments`},
		{[]string{"worker", "--queues", "default="}, 2, `^--queues: `},
		{[]string{"worker", "--concurrency", "0"}, 2, `^--concurrency must be positive$`},
		{[]string{"worker", "--stream-idle", "-1s"}, 2, `^--stream-idle must not be negative$`},
		{[]string{"worker", "--concurrency", "many"}, 2, `^invalid value "many" for flag -concurrency`},
		{[]string{"scheduler", "--bogus"}, 2, `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
		{[]string{"scheduler", "extra"}, 2, `^scheduler takes no arguments`},
		{[]string{"scheduler", "--retention", "-1h"}, 2, `^--retention -1h0m0s: must not be negative$`},
		{[]string{"scheduler", "--record-retention", "1h"}, 2, `^--record-retention needs --retention: records go after the artifacts they name$`},
		{[]string{"scheduler", "--retention", "2h", "--record-retention", "1h"}, 2, `^--record-retention 1h0m0s: must be at least --retention \(2h0m0s\)$`},
		{[]string{"scheduler", "--schedules", "nope.yaml"}, 1, `^schedules file nope\.yaml does not exist$`},
		{[]string{"monitor", "--bogus"}, 2, `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
		{[]string{"monitor", "extra"}, 2, `^monitor takes no arguments$`},
		{[]string{"monitor", "--addr", "nope"}, 2, `^--addr "nope": want HOST:PORT$`},
		{[]string{"monitor", "--addr", "0.0.0.0:0"}, 2, `is not a loopback address`},
		{[]string{"monitor", "--token", "short"}, 2, `^--token: `},
		{[]string{"monitor", "--session-key", "short"}, 2, `^--session-key: use at least 16 characters$`},
		{[]string{"dev", "--bogus"}, 2, `^flag provided but not defined: -bogus \(spool [a-z ]*--help lists the flags\)$`},
		{[]string{"dev", "extra"}, 2, `^dev takes no arguments`},
		{[]string{"dev", "--queues", "x=y"}, 2, `^--queues: `},
	}
	for _, tc := range bad {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// A server that ignores bad usage and starts would run forever.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res := e.SpoolContext(ctx, quietEnv(), tc.args...)
			require.Equal(t, tc.code, res.Code, "stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
			requireNoTrace(t, res.Stderr)
			require.Empty(t, res.Stdout)
			require.Equal(t, 1, strings.Count(res.Stderr, "\n"), "one line on stderr:\n%s", res.Stderr)
			require.Regexp(t, tc.errLike, strings.TrimSuffix(strings.TrimPrefix(res.Stderr, "spool: "), "\n"))
		})
	}

	port := func(t *testing.T) string {
		p, err := testenv.FreePort()
		require.NoError(t, err)
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	monAddr, devAddr := port(t), port(t)
	start := []struct {
		args  []string
		ready string
		get   []string // URLs that must answer 200 while it runs
	}{
		{[]string{"worker", "--concurrency", "1"}, "spool worker: serving", nil},
		{[]string{"scheduler"}, "spool scheduler: ", nil},
		{[]string{"monitor", "--addr", monAddr}, "spool monitor: http://", []string{"http://" + monAddr + "/", "http://" + monAddr + "/healthz"}},
		{[]string{"dev", "--addr", devAddr}, "spool dev is running", []string{"http://" + devAddr + "/", "http://" + devAddr + "/healthz", "http://" + devAddr + "/metrics"}},
	}
	for _, tc := range start {
		t.Run(tc.args[0]+" stops on SIGTERM", func(t *testing.T) {
			p := e.Start(nil, tc.args...)
			require.Eventually(t, func() bool { return strings.Contains(p.Log(), tc.ready) || p.Exited() }, 60*time.Second, 50*time.Millisecond)
			require.False(t, p.Exited(), "exited early:\n%s", p.Log())
			for _, u := range tc.get {
				resp, err := http.Get(u)
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode, u)
			}
			require.NoError(t, p.Stop(30*time.Second), "exit code 0 after SIGTERM:\n%s", p.Log())
			require.Equal(t, 0, p.Cmd.ProcessState.ExitCode())
			requireNoTrace(t, p.Log())
		})
	}
}
