package graph

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParse: Parse never panics, and a graph it returns without errors
// re-parses from its canonical form to the same digest.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	refs, _ := filepath.Glob(filepath.Join("testdata", "reference", ".ai", "tools", "graphs", "*.yaml"))
	for _, p := range append(seeds, refs...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(withNodes(base)))
	f.Add([]byte(withNodes("a: {<<: &x {type: gate}, next: [{when: {any: [{path: 'state.l[0]'}]}, to: b}, b]}\nb: *x")))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, r, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		c, cerr := g.Canonical()
		_ = g.Validate()
		_ = Nodes(g, []StepRecord{{Step: 1, Node: g.Start, Status: StepStatusOK}}, g.Start, NodeRunning, "running")
		if len(r.Errors) > 0 {
			return
		}
		if cerr != nil {
			t.Fatalf("a valid graph does not encode: %v", cerr)
		}
		g2, r2, err := Parse("fuzz", c)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, c)
		}
		if len(r2.Errors) > 0 {
			t.Fatalf("canonical form has errors %v\n%s", r2.Errors, c)
		}
		if d1, d2 := g.Digest(), g2.Digest(); d1 != d2 {
			c2, _ := g2.Canonical()
			t.Fatalf("digest changed on re-parse\nfirst:\n%s\nsecond:\n%s", c, c2)
		}
	})
}

// FuzzValue: interpolation never panics, whatever the template.
func FuzzValue(f *testing.F) {
	for _, s := range []string{
		"${state.files[0].path}", "a ${inputs.x || \"d\"} b", "${state.raw | from_json | keys | length}",
		"$${x} ${", "${'}'}", "${a || 'b' | json}", "${state.x[}", "${_now} ${_timestamp}", "${state.n | upper | lower}",
		"${\"\\u00e9\" || 1e400}", "${state.files.99999999999999999999}",
	} {
		f.Add(s)
	}
	scope := map[string]any{
		"state": map[string]any{
			"files": []any{map[string]any{"path": "a"}}, "raw": `{"a":[1,2]}`, "n": 1.5, "x": nil, "obj": map[string]any{"k": []any{true}},
		},
		"inputs": map[string]any{"x": "y"},
		"run":    RunScope{ID: "r", StartedAt: time.Unix(0, 0)}.Map(),
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = Value(s, scope)
		_, _ = Value(map[string]any{"k": []any{s}}, scope)
		_, _ = String(s, scope)
		_, _ = refsOf(s)
	})
}
