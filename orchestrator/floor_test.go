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
// activations on the orchestrator's floor, takes its services
// (Services), and none makes a registry, activations or ledger of its own
// or wraps Redis for spool's scripts. Tests may: they set up states that
// no operation makes.
func TestFloor(t *testing.T) {
	t.Parallel()
	const module = "github.com/spool-run/spool/"
	forbidden := map[string]bool{"registry.New": true, "registry.NewActivations": true, "ledger.New": true}
	fset := token.NewFileSet()
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
				path == filepath.Join("..", "orchestrator"), path == filepath.Join("..", "worker"):
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
		above, pipes := false, false
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			above = above || p == module+"orchestrator"
			pipes = pipes || p == module+"internal/autopipe"
		}
		if !above {
			return nil
		}
		if pipes {
			t.Errorf("%s imports internal/autopipe: the orchestrator wraps Redis for spool's scripts", path)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Services" && len(n.Args) == 0 {
					t.Errorf("%s: calls Services: the services are the worker's; use the orchestrator's operations",
						fset.Position(n.Pos()))
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && forbidden[x.Name+"."+n.Sel.Name] {
					t.Errorf("%s: %s.%s: the orchestrator holds the registry, activations and ledger", fset.Position(n.Pos()),
						x.Name, n.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
