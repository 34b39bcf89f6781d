package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
)

// TestPythonClient runs the Python client's tests (clients/python/tests,
// python3 and pytest, standard library only) against a real `spool api`,
// Redis and worker: run and wait, errors as problems, cancel, approve, an
// event stream cut and resumed mid-thread with every durable event once,
// the model's words as deltas (events(deltas=True)) equal to each turn's
// committed text, a graph run through its approval, and the generated
// models current with the OpenAPI document. Without python3 and pytest
// it skips, or fails under SPOOL_TEST_REQUIRE_REAL=1.
func TestPythonClient(t *testing.T) {
	t.Parallel()
	py := python(t)
	api := clientAPI(t)

	dir, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runClient(t, dir, api.base, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v\n%s", err, out)
	}
	t.Logf("pytest:\n%s", out)
}

// clientAPI is the `spool api` the client tests run against, with a
// worker, on the API tests' project and the graph tests' (t/greet,
// t/slow, t/gated, g/review), g/inbox, which waits for two messages, and
// t/talk, whose model writes its text and a tool call's arguments in
// pieces (scripts/talk.yaml: the event stream's deltas).
func clientAPI(t *testing.T) *apiProc {
	t.Helper()
	files := apiProject()
	for k, v := range graphProject() {
		files[k] = v
	}
	files[".ai/graphs/g/inbox.yaml"] = "version: \"1\"\ndescription: two messages in turn\n" + walkPerms + inboxGraph
	files[".ai/directives/t/talk.md"] = directive("talk", `turns="3"`, fsPerms, `<success>done</success>`)
	files["scripts/talk.yaml"] = talkScript
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", "4")
	return startAPI(t, e)
}

// talkScript is t/talk's model for the client tests: a text (some of it
// not ASCII: offsets count bytes) with a tool call, then a text, each
// streamed in pieces stream_delay apart.
const talkScript = `price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
latency: 200ms
stream_delay: 300ms
directives:
  "t/talk":
    - text: "first: the quick brown fox — naïve, über — jumps over the lazy dog"
      tool_calls: [{tool: rye/file-system/fs_write, input: {path: talk.txt, content: "one, déjà"}}]
    - text: "second: the lazy dog sleeps; ça va"
`

// python is pythonWithPytest's python3; without one the test skips, or
// fails under SPOOL_TEST_REQUIRE_REAL=1.
func python(t *testing.T) string {
	t.Helper()
	py, err := pythonWithPytest()
	if err != nil {
		if testenv.RequireReal() {
			t.Fatalf("SPOOL_TEST_REQUIRE_REAL=1 but no python3 with pytest: %v", err)
		}
		t.Skipf("no python3 with pytest: %v", err)
	}
	return py
}

// pythonWithPytest is the first python3 that imports pytest: the one on
// PATH, else the system's (a version manager's python3 first on PATH
// may lack the distribution's pytest).
func pythonWithPytest() (string, error) {
	var err error
	for _, c := range []string{"python3", "/usr/bin/python3"} {
		var py string
		if py, err = exec.LookPath(c); err != nil {
			continue
		}
		if err = exec.Command(py, "-c", "import pytest").Run(); err == nil {
			return py, nil
		}
	}
	return "", err
}
