package directive

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

const simple = "```xml\n<directive name=\"%s\" version=\"1.0.0\"><metadata><description>%s</description></metadata></directive>\n```\n"

func fileOf(name, desc string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(strings.ReplaceAll(strings.Replace(simple, "%s", name, 1), "%s", desc))}
}

func TestResolverFirstMatchWins(t *testing.T) {
	project := fstest.MapFS{"a/x.md": fileOf("x", "project"), "broken.md": {Data: []byte("no fence")}}
	user := fstest.MapFS{"a/x.md": fileOf("x", "user"), "a/y.md": fileOf("y", "user")}
	r := &Resolver{Spaces: []Space{{Name: SpaceProject, FS: project}, {Name: SpaceUser, FS: user}, SystemSpace()}}

	tests := []struct {
		name, space, desc string
	}{
		{"a/x", SpaceProject, "project"},
		{"a/x.md", SpaceProject, "project"},
		{"a/y", SpaceUser, "user"},
		{DefaultContinuation, SpaceSystem, ""},
	}
	for _, tt := range tests {
		d, space, err := r.Resolve(tt.name)
		if err != nil {
			t.Fatalf("Resolve(%q): %v", tt.name, err)
		}
		if space != tt.space || (tt.desc != "" && d.Description != tt.desc) {
			t.Errorf("Resolve(%q) = space %q desc %q, want %q %q", tt.name, space, d.Description, tt.space, tt.desc)
		}
	}
	if _, _, err := r.Resolve("a/none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing directive: err = %v, want ErrNotFound", err)
	}
	if _, _, err := r.Resolve("broken"); err == nil || !strings.Contains(err.Error(), "project:.ai/directives/broken.md") {
		t.Errorf("broken directive: err = %v", err)
	}
	for _, bad := range []string{"", "../x", "/etc/passwd", "a//b", `a\b`, "a/./b"} {
		if _, _, err := r.Resolve(bad); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q): err = %v, want a name error", bad, err)
		}
	}
}

func TestNewResolverOverDirectories(t *testing.T) {
	proj, home := t.TempDir(), t.TempDir()
	write := func(root, rel, name, desc string) {
		p := filepath.Join(root, ".ai", "directives", filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, fileOf(name, desc).Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(home, "u/only.md", "only", "home")
	write(home, "both.md", "both", "home")
	write(proj, "both.md", "both", "proj")
	r := NewResolver(proj, home)
	if d, sp, err := r.Resolve("both"); err != nil || sp != SpaceProject || d.Description != "proj" {
		t.Errorf("both: %v %q %v", d, sp, err)
	}
	if d, sp, err := r.Resolve("u/only"); err != nil || sp != SpaceUser || d.Description != "home" {
		t.Errorf("u/only: %v %q %v", d, sp, err)
	}
	if _, sp, err := NewResolver(proj, "").Resolve("u/only"); !errors.Is(err, ErrNotFound) {
		t.Errorf("without home: %q %v", sp, err)
	}
}

func TestContinuationSeed(t *testing.T) {
	cont, space, err := (&Resolver{Spaces: []Space{SystemSpace()}}).Resolve(DefaultContinuation)
	if err != nil || space != SpaceSystem {
		t.Fatal(space, err)
	}
	if err := Check(cont); err != nil {
		t.Fatal(err)
	}
	seed, err := ContinuationSeed(cont, "agency/discover", "Find {input:x} leads.", "agency/discover-17", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"agency/discover-17", "`agency/discover`", "Find {input:x} leads.", "Continue executing the directive. Pick up where the previous thread left off."} {
		if !strings.Contains(seed, want) {
			t.Errorf("seed lacks %q:\n%s", want, seed)
		}
	}
	if strings.Contains(seed, "```xml") || strings.Contains(seed, "{input:previous_thread_id}") {
		t.Errorf("seed holds the fence or unrendered inputs:\n%s", seed)
	}
	seed, err = ContinuationSeed(cont, "d", "body", "p-1", "The API key is fixed; retry.")
	if err != nil || !strings.Contains(seed, "The API key is fixed; retry.") || strings.Contains(seed, "Continue executing") {
		t.Errorf("custom message: %v\n%s", err, seed)
	}
	if _, err := ContinuationSeed(cont, "d", "body", "", ""); err != nil {
		t.Errorf("empty previous id is a value, not missing: %v", err)
	}
}

func TestValidateFiles(t *testing.T) {
	if errs := ValidateFiles([]string{"testdata/depth_child.md", "testdata/implement_dashboard.md"}); len(errs) != 0 {
		t.Errorf("valid files: %v", errs)
	}
	errs := ValidateFiles([]string{"testdata/bad", "testdata/nope.md"})
	if len(errs) != 2 {
		t.Fatalf("errs = %v", errs)
	}
	if want := `testdata/bad/depth_child.md:14: <limits spend="abc">: not a number`; errs[0].Error() != want {
		t.Errorf("errs[0] = %q, want %q", errs[0], want)
	}
	if !errors.Is(errs[1], os.ErrNotExist) {
		t.Errorf("errs[1] = %v", errs[1])
	}
	// Check: missing version and bad default
	dir := t.TempDir()
	p := filepath.Join(dir, "v.md")
	writeTree(t, dir, tree{"v.md": "```xml\n<directive name=\"v\"><inputs><input name=\"n\" type=\"integer\" default=\"x\"/></inputs></directive>\n```\n"})
	if errs := ValidateFiles([]string{p}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "missing version") {
		t.Errorf("missing version: %v", errs)
	}
	writeTree(t, dir, tree{"v.md": "```xml\n<directive name=\"v\" version=\"1\"><inputs><input name=\"n\" type=\"integer\" default=\"x\"/></inputs></directive>\n```\n"})
	if errs := ValidateFiles([]string{p}); len(errs) != 1 || !strings.Contains(errs[0].Error(), `<input name="n" default="x">: want an integer`) {
		t.Errorf("bad default: %v", errs)
	}
	if errs := ValidateFiles([]string{t.TempDir()}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "no .md directive files") {
		t.Errorf("empty dir: %v", errs)
	}
}
