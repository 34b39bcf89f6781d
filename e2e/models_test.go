package e2e

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
)

// TestChildrenRunTheRootsModel: a root run with --model script:X runs its
// children on X too, though their directive names a tier; a spawn that
// names a model runs that; a spawn naming a script the root did not
// bundle is refused with a message saying how to make it available.
func TestChildrenRunTheRootsModel(t *testing.T) {
	t.Parallel()
	tierDirective := func(name string) string {
		return strings.Replace(directive(name, `turns="4"`, spawnPerms, `<success>done</success>`), "<limits", `<model tier="general" /><limits`, 1)
	}
	const mine = `directives:
  "m/root":
    - tool_calls:
        - {tool: rye/agent/threads/thread_directive, input: {directive_name: m/kid}}
        - {tool: rye/agent/threads/thread_directive, input: {directive_name: m/kid, model: "script:scripts/other.yaml"}}
        - {tool: rye/agent/threads/thread_directive, input: {directive_name: m/kid, model: "script:scripts/unbundled.yaml"}}
      usage: {input: 10, output: 5}
    - text: "root: {{toJSON .tool_results}}"
      usage: {input: 10, output: 5}
  "m/kid":
    - text: "kid ran on mine"
      usage: {input: 10, output: 5}
`
	const other = "directives:\n  \"*\":\n    - text: \"kid ran on other\"\n      usage: {input: 10, output: 5}\n"
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/m/root.md":     tierDirective("root"),
		".ai/directives/m/kid.md":      tierDirective("kid"),
		".ai/config/agent/models.yaml": "tiers:\n  general: claude-sonnet-4-5\n  spare: script:scripts/other.yaml\n",
		"scripts/mine.yaml":            mine,
		"scripts/other.yaml":           other,
		"scripts/unbundled.yaml":       other,
	}})
	e.StartWorker("--concurrency", "3")
	rec, res := runJSON(t, e, "m/root", "--model", "script:scripts/mine.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Contains(t, rec.Result, "kid ran on mine", "the child inherits the root's --model over its directive's tier")
	require.Contains(t, rec.Result, "kid ran on other", "a spawn's own model wins")
	require.Contains(t, rec.Result, "is not in the project's bundle", "an unbundled script is refused, saying why")
	kids := children(t, e, rec.ThreadID)
	require.Len(t, kids, 2)
	for _, k := range kids {
		require.Contains(t, []string{"script:scripts/mine.yaml", "script:scripts/other.yaml"}, k.Model)
	}
}
