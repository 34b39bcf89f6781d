package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/spool-run/spool/spawn"
)

func TestMain(m *testing.M) {
	if os.Getenv(spawnHelperEnv) == "1" {
		os.Exit(spawnHelper())
	}
	for _, helper := range testHelpers {
		if code, ran := helper(); ran {
			os.Exit(code)
		}
	}
	goleak.VerifyTestMain(m)
}

// testHelpers make the test binary a helper process of a test when their
// variable is set (as the platform's tests add them).
var testHelpers []func() (code int, ran bool)

// spawnHelperEnv makes the test binary a tool's client of the spawn
// socket (see TestExternalToolStartsChildWithoutSecrets): it starts one
// child through the worker that runs the call and prints the record as
// the tool's output.
const spawnHelperEnv = "SPOOL_TOOLS_TEST_SPAWN_HELPER"

func spawnHelper() int {
	c := spawn.FromEnv()
	if c == nil {
		fmt.Println(`{"output": "no spawn socket", "is_error": true}`)
		return 0
	}
	rec, err := c.Start(context.Background(), spawn.Request{Directive: "t/child", Inputs: map[string]any{"n": 1}})
	if err != nil {
		out, _ := json.Marshal(map[string]any{"output": err.Error(), "is_error": true})
		fmt.Println(string(out))
		return 0
	}
	out, _ := json.Marshal(map[string]any{"output": rec})
	fmt.Println(string(out))
	return 0
}
