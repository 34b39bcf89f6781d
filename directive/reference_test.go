package directive

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// referenceShapes are the element paths, attributes (@) and "*" texts (=*)
// that the reference system's own XML directives (its bundles and e2e
// tests) write, every one of which spool reads unchanged. The corpus of
// testdata/reference, directives written here in those shapes, holds them
// all, and validates.
var referenceShapes = []string{
	"/directive",
	"/directive/context",
	"/directive/context/tech_stack",
	"/directive/inputs",
	"/directive/inputs/input",
	"/directive/inputs/input@default",
	"/directive/inputs/input@name",
	"/directive/inputs/input@required",
	"/directive/inputs/input@type",
	"/directive/metadata",
	"/directive/metadata/author",
	"/directive/metadata/category",
	"/directive/metadata/context",
	"/directive/metadata/context/after",
	"/directive/metadata/context/before",
	"/directive/metadata/context/suppress",
	"/directive/metadata/context/system",
	"/directive/metadata/context_budget",
	"/directive/metadata/context_budget/estimated_usage",
	"/directive/metadata/context_budget/spawn_threshold",
	"/directive/metadata/context_budget/step_count",
	"/directive/metadata/description",
	"/directive/metadata/limits",
	"/directive/metadata/limits@depth",
	"/directive/metadata/limits@duration_seconds",
	"/directive/metadata/limits@max_spend",
	"/directive/metadata/limits@max_tokens",
	"/directive/metadata/limits@max_turns",
	"/directive/metadata/limits@spawns",
	"/directive/metadata/limits@spend",
	"/directive/metadata/limits@tokens",
	"/directive/metadata/limits@turns",
	"/directive/metadata/model",
	"/directive/metadata/model@fallback",
	"/directive/metadata/model@id",
	"/directive/metadata/model@provider",
	"/directive/metadata/model@tier",
	"/directive/metadata/permissions",
	"/directive/metadata/permissions/cap",
	"/directive/metadata/permissions/execute",
	"/directive/metadata/permissions/execute/directive",
	"/directive/metadata/permissions/execute/directive=*",
	"/directive/metadata/permissions/execute/knowledge",
	"/directive/metadata/permissions/execute/knowledge=*",
	"/directive/metadata/permissions/execute/tool",
	"/directive/metadata/permissions/execute/tool=*",
	"/directive/metadata/permissions/execute=*",
	"/directive/metadata/permissions/fetch",
	"/directive/metadata/permissions/fetch/directive",
	"/directive/metadata/permissions/fetch/directive=*",
	"/directive/metadata/permissions/fetch/knowledge",
	"/directive/metadata/permissions/fetch/knowledge=*",
	"/directive/metadata/permissions/fetch/tool",
	"/directive/metadata/permissions/fetch/tool=*",
	"/directive/metadata/permissions/fetch=*",
	"/directive/metadata/permissions/load",
	"/directive/metadata/permissions/load/directive",
	"/directive/metadata/permissions/load/directive=*",
	"/directive/metadata/permissions/load/knowledge",
	"/directive/metadata/permissions/load/knowledge=*",
	"/directive/metadata/permissions/load/tool",
	"/directive/metadata/permissions/load/tool=*",
	"/directive/metadata/permissions/load=*",
	"/directive/metadata/permissions/search",
	"/directive/metadata/permissions/search/directive",
	"/directive/metadata/permissions/search/directive=*",
	"/directive/metadata/permissions/search/knowledge",
	"/directive/metadata/permissions/search/knowledge=*",
	"/directive/metadata/permissions/search/tool",
	"/directive/metadata/permissions/search/tool=*",
	"/directive/metadata/permissions/search=*",
	"/directive/metadata/permissions/sign",
	"/directive/metadata/permissions/sign/directive",
	"/directive/metadata/permissions/sign/directive=*",
	"/directive/metadata/permissions/sign/knowledge",
	"/directive/metadata/permissions/sign/knowledge=*",
	"/directive/metadata/permissions/sign/tool",
	"/directive/metadata/permissions/sign/tool=*",
	"/directive/metadata/permissions/sign=*",
	"/directive/metadata/permissions=*",
	"/directive/metadata/relationships",
	"/directive/metadata/relationships/suggests",
	"/directive/outputs",
	"/directive/outputs/child_thread_id",
	"/directive/outputs/failure",
	"/directive/outputs/output",
	"/directive/outputs/output@name",
	"/directive/outputs/output@required",
	"/directive/outputs/output@type",
	"/directive/outputs/result",
	"/directive/outputs/success",
	"/directive/permissions",
	"/directive/permissions/execute",
	"/directive/permissions/execute/tool",
	"/directive/process",
	"/directive/process/step",
	"/directive/process/step/action",
	"/directive/process/step/description",
	"/directive/process/step/execute",
	"/directive/process/step/execute/param",
	"/directive/process/step/execute/param@name",
	"/directive/process/step/execute/param@value",
	"/directive/process/step/execute@item_id",
	"/directive/process/step/execute@item_type",
	"/directive/process/step/load",
	"/directive/process/step/load@item_id",
	"/directive/process/step/load@item_type",
	"/directive/process/step/search",
	"/directive/process/step/search@item_type",
	"/directive/process/step/search@query",
	"/directive/process/step/sign",
	"/directive/process/step/sign@item_id",
	"/directive/process/step/sign@item_type",
	"/directive/process/step/verification",
	"/directive/process/step/verification/check",
	"/directive/process/step@name",
	"/directive/success_criteria",
	"/directive/success_criteria/criterion",
	"/directive@extends",
	"/directive@name",
	"/directive@version",
}

// TestReferenceShapes: every directive of testdata/reference validates
// (parse, checks, a name that matches its file), and together they write
// every shape of referenceShapes.
func TestReferenceShapes(t *testing.T) {
	require.Empty(t, ValidateFiles([]string{"testdata/reference"}))
	seen := map[string]bool{}
	err := filepath.WalkDir("testdata/reference", func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		src := string(data)
		start := strings.Index(src, "```xml\n")
		end := strings.Index(src[start+7:], "\n```")
		root, err := parseXML(p, []byte(src[start+7:start+7+end]), 1)
		if err != nil {
			return err
		}
		var walk func(n *node, parent string)
		walk = func(n *node, parent string) {
			q := parent + "/" + n.name
			seen[q] = true
			for _, a := range n.attrs {
				seen[q+"@"+a.Name.Local] = true
			}
			if len(n.children) == 0 && n.content() == "*" {
				seen[q+"=*"] = true
			}
			for _, c := range n.children {
				walk(c, q)
			}
		}
		walk(root, "")
		return nil
	})
	require.NoError(t, err)
	var missing []string
	for _, s := range referenceShapes {
		if !seen[s] {
			missing = append(missing, s)
		}
	}
	require.Empty(t, missing, "shapes the reference writes that testdata/reference does not")
}

// TestReferenceFetch: <fetch> grants searching and loading what it names,
// written as a wildcard or item by item; nothing else.
func TestReferenceFetch(t *testing.T) {
	d := parseFile(t, "reference/test/threads/fetch_everything.md")
	for _, c := range []string{"rye.search.knowledge.any", "rye.load.directive.a.b", "rye.load.tool.x"} {
		require.True(t, thread.Match(d.Permissions, c), "%s from %q", c, d.Permissions)
	}
	d = parseFile(t, "reference/test/threads/pipeline.md")
	require.True(t, thread.Match(d.Permissions, "rye.load.knowledge.graphs.g1"), "%q", d.Permissions)
	require.True(t, thread.Match(d.Permissions, "rye.search.knowledge.graphs.g1"), "%q", d.Permissions)
	require.False(t, thread.Match(d.Permissions, "rye.load.knowledge.other"), "%q", d.Permissions)
	require.False(t, slices.ContainsFunc(d.Permissions, func(c string) bool { return strings.Contains(c, ".fetch.") }),
		"fetch is written as the search and load it grants: %q", d.Permissions)
}
