package orchestrator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFloor holds the packages above the orchestrator to its operations
// (ARCHITECTURE.md): no file of theirs but the worker's, which runs
// activations on the orchestrator's floor, imports registry, ledger or
// queue (the orchestrator names what they need of them: its errors,
// Filter, spooltype.Record), takes the worker's Runtime or its services
// (Services), or makes a registry, activations or ledger of its own or
// wraps Redis for spool's scripts; and none but the scheduler's and the
// worker's takes a Housekeeper. Tests may: they set up states that no
// operation makes. So may the bench commands and the test harnesses
// (bench/..., internal/testing/...), outside the runtime, import the
// floor.
func TestFloor(t *testing.T) {
	t.Parallel()
	const module = "github.com/spool-run/spool/"
	forbidden := map[string]bool{"registry.New": true, "registry.NewActivations": true, "ledger.New": true}
	floor := map[string]bool{module + "registry": true, module + "ledger": true, module + "queue": true}
	fset := token.NewFileSet()
	files := map[string][]*ast.File{} // a package's directory → its files (not tests)
	imports := map[string][]string{}  // a package's directory → the module's packages it imports
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			switch {
			case path == "..":
				return nil
			case name == "testdata" || name == "node_modules" || strings.HasPrefix(name, "."),
				path == filepath.Join("..", "orchestrator"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, ".."+string(filepath.Separator))))
		files[dir] = append(files[dir], f)
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, module) {
				imports[dir] = append(imports[dir], strings.TrimPrefix(p, module))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	above := abovePackages(imports)
	if !above["api"] || !above["cmd/spool"] || !above["scheduler"] || above["registry"] {
		t.Fatalf("packages above the orchestrator: %v; want api, cmd/spool and scheduler, not registry", above)
	}
	for dir := range above {
		if dir == "worker" {
			continue
		}
		outside := dir == "bench" || strings.HasPrefix(dir, "bench/") || strings.HasPrefix(dir, "internal/testing/")
		for _, f := range files[dir] {
			checkAbove(t, fset, f, dir, outside, forbidden, floor)
		}
	}
}

// abovePackages are the directories of the packages that import the
// orchestrator, or a package that does.
func abovePackages(imports map[string][]string) map[string]bool {
	above := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for dir, deps := range imports {
			for _, p := range deps {
				if !above[dir] && (p == "orchestrator" || above[p]) {
					above[dir], changed = true, true
				}
			}
		}
	}
	return above
}

// checkAbove holds file f of package dir, above the orchestrator and not
// the worker, to TestFloor's rules; outside (a bench command or a test
// harness) may import the floor, and only its files that import the
// orchestrator are held to the rest.
func checkAbove(t *testing.T, fset *token.FileSet, f *ast.File, dir string, outside bool, forbidden, floor map[string]bool) {
	t.Helper()
	if outside && !importsOrchestrator(f) {
		return
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case p == "github.com/spool-run/spool/internal/autopipe":
			t.Errorf("%s imports internal/autopipe: the orchestrator wraps Redis for spool's scripts", fset.Position(imp.Pos()))
		case floor[p] && !outside:
			t.Errorf("%s imports %s: the orchestrator names what a package above it needs of its floor", fset.Position(imp.Pos()), p)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) != 0 {
				return true
			}
			switch {
			case sel.Sel.Name == "Services" || sel.Sel.Name == "Runtime":
				t.Errorf("%s: calls %s: the runtime and its services are the worker's; use the orchestrator's operations",
					fset.Position(n.Pos()), sel.Sel.Name)
			case sel.Sel.Name == "Housekeeper" && dir != "scheduler":
				t.Errorf("%s: calls Housekeeper: housekeeping is the scheduler's and the worker's", fset.Position(n.Pos()))
			}
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && forbidden[x.Name+"."+n.Sel.Name] {
				t.Errorf("%s: %s.%s: the orchestrator holds the registry, activations and ledger", fset.Position(n.Pos()),
					x.Name, n.Sel.Name)
			}
		}
		return true
	})
}

// importsOrchestrator reports whether f imports the orchestrator.
func importsOrchestrator(f *ast.File) bool {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/spool-run/spool/orchestrator" {
			return true
		}
	}
	return false
}
