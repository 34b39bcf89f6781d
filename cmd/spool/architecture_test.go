package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: ARCHITECTURE.md's package drawing
// (its first code block) names every package of the module, so that a
// new package takes its place on the map ("bench/..." names every
// package under bench).
func TestArchitectureNamesEveryPackage(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	named, trees := drawingNames(t, root)
	pkgs := modulePackages(t, root)
	if len(pkgs) < 40 {
		t.Fatalf("found %d packages; want the module's", len(pkgs))
	}
next:
	for p := range pkgs {
		if named[p] || p == "." {
			continue
		}
		for _, tree := range trees {
			if strings.HasPrefix(p+"/", tree) {
				continue next
			}
		}
		t.Errorf("ARCHITECTURE.md's package drawing does not name package %s", p)
	}
}

// TestHarnessesStayOutOfTheRuntime: internal/ holds the runtime's
// helpers (autopipe, redisfn, reply) and, under internal/testing, the
// test harnesses, which only tests, the harnesses themselves and the
// bench commands import: no file the spool binary is built from does.
func TestHarnessesStayOutOfTheRuntime(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	const harnesses = "github.com/spool-run/spool/internal/testing/"
	fset := token.NewFileSet()
	files := 0
	for p := range modulePackages(t, root) {
		if p == "bench" || strings.HasPrefix(p, "bench/") || strings.HasPrefix(p, "internal/testing/") {
			continue
		}
		names, err := filepath.Glob(filepath.Join(root, p, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, imp := range f.Imports {
				if path, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(path, harnesses) {
					t.Errorf("%s imports %s: a test harness, for tests only", name, path)
				}
			}
		}
	}
	if files < 100 {
		t.Fatalf("read %d files of the runtime; want the module's", files)
	}
}

// drawingNames are the package paths ARCHITECTURE.md's first code block
// names, and the trees it names as "tree/..." (each with its slash).
func drawingNames(t *testing.T, root string) (map[string]bool, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```\n")
	drawing, _, closed := strings.Cut(rest, "```\n")
	if !ok || !closed {
		t.Fatal("ARCHITECTURE.md has no code block: the package drawing is its first")
	}
	named := map[string]bool{}
	var trees []string
	for _, m := range regexp.MustCompile(`[a-z][a-z0-9]*(?:/[a-z][a-z0-9]*)*(?:/\.\.\.)?`).FindAllString(drawing, -1) {
		if tree, ok := strings.CutSuffix(m, "/..."); ok {
			trees = append(trees, tree+"/")
		}
		named[m] = true
	}
	return named, trees
}

// modulePackages are the directories under root that hold Go files,
// relative to it, but testdata and hidden ones.
func modulePackages(t *testing.T, root string) map[string]bool {
	t.Helper()
	pkgs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}
