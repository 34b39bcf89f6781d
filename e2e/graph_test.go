package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// graphDirective renders a directive of the graph tests, on the fast tier
// (models.yaml maps it to scripts/graph.yaml).
func graphDirective(name, perms, inputs string) string {
	return fmt.Sprintf("# %s\n\n```xml\n<directive name=%q version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n    <model tier=\"fast\" />\n"+
		"    <limits turns=\"4\" spend=\"0.1\" />\n    <permissions>%s</permissions>\n  </metadata>\n  <inputs>%s</inputs>\n</directive>\n```\n",
		name, name, perms, inputs)
}

// graphReview: a tool step, a foreach of child threads (two at a time,
// a failed item kept), an optional approval node, and two returns.
const graphReview = `version: "1.0.0"
description: plan, review each topic in a child, sign off when asked, return
permissions:
  - rye.execute.tool.rye.file-system.*
  - rye.execute.directive.g.*
limits: {spend: 0.5, max_steps: 20}
inputs:
  type: object
  required: [topics]
  properties:
    topics: {type: array, items: {type: string}}
    sign_off: {type: boolean, default: false}
config:
  start: plan
  nodes:
    plan:
      action:
        tool: rye/file-system/fs_write
        params: {path: plan.md, content: "${inputs.topics | length} topics"}
      assign: {planned: "${inputs.topics | length}"}
      next: review
    review:
      type: foreach
      over: "${inputs.topics}"
      as: topic
      parallel: true
      max_concurrency: 2
      on_item_error: continue
      action:
        directive: g/topic
        inputs: {topic: "${topic}"}
        limits: {turns: 4, spend: 0.05}
      collect: reviews
      assign: {failed: "${result.failed}"}
      next:
        - when: {path: inputs.sign_off, op: eq, value: true}
          to: sign_off
        - to: done
    sign_off:
      type: approval
      prompt: "Ship the ${state.planned} reviews?"
      show: {failed: "${state.failed}"}
      next:
        - when: {path: result.approved, op: eq, value: true}
          to: done
        - to: rejected
    done:
      type: return
      output: {reviewed: "${state.reviews | length}", failed: "${state.failed}", planned: "${state.planned}"}
    rejected:
      type: return
      output: {rejected: true}
`

// graphHold: a foreach of children that wait at a gate file, then a
// return; cancelled and resumed by the tests.
const graphHold = `version: "1.0.0"
description: hold children at a gate
permissions:
  - rye.execute.directive.g.*
  - rye.execute.tool.g.gate
limits: {spend: 0.5}
inputs:
  type: object
  required: [items, gate]
  properties:
    items: {type: array, items: {type: string}}
    gate: {type: string}
config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: "${inputs.items}"
      as: it
      parallel: true
      max_concurrency: 2
      action:
        directive: g/waiter
        inputs: {item: "${it}", gate: "${inputs.gate}"}
      collect: held
      next: done
    done:
      type: return
      output: {held: "${state.held | length}"}
`

// graphBroken fails at its second step (a file that is not there).
const graphBroken = `version: "1.0.0"
description: fails at read
permissions:
  - rye.execute.tool.rye.file-system.*
config:
  start: plan
  nodes:
    plan:
      action: {tool: rye/file-system/fs_write, params: {path: notes.md, content: "notes"}}
      next: read
    read:
      action: {tool: rye/file-system/fs_read, params: {path: "${state.path || \"missing.md\"}"}}
      assign: {text: "${result.text}"}
      next: done
    done:
      type: return
      output: {text: "${state.text}"}
`

const gateTool = `#!/bin/sh
# g/gate: waits (at most 50 s) until the file named by {"file": PATH} exists.
file=$(cat | sed -n 's/.*"file": *"\([^"]*\)".*/\1/p')
i=0
while [ ! -e "$file" ] && [ "$i" -lt 500 ]; do sleep 0.1; i=$((i + 1)); done
if [ -e "$file" ]; then echo '{"output": "released"}'; else echo '{"output": "gate timed out", "is_error": true}'; fi
`

func graphProject() map[string]string {
	return map[string]string{
		".ai/graphs/g/review.yaml":     graphReview,
		".ai/graphs/g/hold.yaml":       graphHold,
		".ai/graphs/g/broken.yaml":     graphBroken,
		".ai/directives/g/topic.md":    graphDirective("topic", fsPerms, `<input name="topic" type="string" required="true">topic</input>`),
		".ai/directives/g/waiter.md":   graphDirective("waiter", `<execute><tool>g/gate</tool></execute>`, `<input name="item" type="string" required="true">item</input><input name="gate" type="string" required="true">gate</input>`),
		".ai/tools/g/gate.sh":          gateTool,
		".ai/config/agent/models.yaml": "tiers:\n  fast: script:scripts/graph.yaml\n",
		"scripts/graph.yaml":           script("graph"),
	}
}

// graphEnv is a graph project with a worker.
func graphEnv(t *testing.T, files map[string]string) *spooltest.Env {
	t.Helper()
	all := graphProject()
	for k, v := range files {
		all[k] = v
	}
	return workerEnv(t, all, "4")
}

// gateFile is a file name the test creates to let g/waiter children go
// on.
func gateFile(t *testing.T) (path string, release func()) {
	p := filepath.Join(t.TempDir(), "gate")
	return p, func() { require.NoError(t, os.WriteFile(p, []byte("go"), 0o644)) }
}

// waitRecord polls id's record until ok holds.
func waitRecord(t *testing.T, e *spooltest.Env, id, what string, ok func(*registry.Record) bool) *registry.Record {
	t.Helper()
	var rec *registry.Record
	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(t.Context(), id)
		if err != nil {
			return false
		}
		rec = r
		return ok(r)
	}, 2*time.Minute, 50*time.Millisecond, "%s: %s", id, what)
	return rec
}

// holding: a g/hold run waits on its children.
func holding(r *registry.Record) bool {
	return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForChildren
}
