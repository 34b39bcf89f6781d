// Package e2e tests spool end to end: the real binary, several worker
// processes, real Redis and (in CI) the real S3-compatible server.
package e2e

import (
	"embed"
	"testing"

	"github.com/spool-run/spool/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// scripts are the scripted provider's model scripts the tests run.
//
//go:embed testdata/scripts/*.yaml
var scripts embed.FS

// script returns testdata/scripts/<name>.yaml, a scripted provider's
// script (provider/scripted.go) for a test project's scripts/ folder.
func script(name string) string {
	b, err := scripts.ReadFile("testdata/scripts/" + name + ".yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}
