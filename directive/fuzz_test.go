package directive

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzParse: the parser never panics, errors are one line, and a parsed
// directive is consistent (named, prompt without signature, normalised
// permissions, valid hooks, fail-closed permissions).
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.md")
	bad, _ := filepath.Glob("testdata/bad/*.md")
	ref, _ := filepath.Glob("testdata/reference/*/*.md")
	ref2, _ := filepath.Glob("testdata/reference/*/*/*.md")
	for _, p := range slices.Concat(files, bad, ref, ref2) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(wrap(`<metadata><limits turns="1e3" spend="-0"/></metadata>`)))
	f.Add([]byte("<!-- rye:signed:a -->"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("f.md", data)
		if err != nil {
			if d != nil {
				t.Fatal("non-nil directive with an error")
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "f.md") {
				t.Fatalf("bad error message %q", msg)
			}
			return
		}
		if d.Name == "" {
			t.Fatal("parsed directive without a name")
		}
		if d.Signature != "" && strings.Contains(d.Prompt, d.Signature) && !strings.Contains(string(data[len(d.Signature):]), d.Signature) {
			t.Fatal("prompt holds the signature line")
		}
		if len(d.Prompt) > len(data) {
			t.Fatal("prompt longer than the file")
		}
		if !d.PermissionsDeclared && len(d.Permissions) != 0 {
			t.Fatalf("permissions %q without a declaration", d.Permissions)
		}
		for _, p := range d.Permissions {
			if p == "" || strings.Contains(p, "/") || strings.ContainsAny(p, " \t\n") {
				t.Fatalf("bad permission %q", p)
			}
		}
		for _, h := range d.Hooks {
			if err := h.Validate(); err != nil {
				t.Fatalf("parsed hook invalid: %v", err)
			}
		}
		_ = RenderBody(d, map[string]any{"level": 1})
		_, _ = ValidateInputs(d, map[string]any{})
		_ = Check(d)
	})
}
