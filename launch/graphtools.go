package launch

import (
	"io/fs"
	"strings"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/tools"
)

// GraphTools says which tools a graph's tool actions can name in the
// project files: the built-in tools (rye/bash among them), the worker's
// own (thread_directive, orchestrator, directive_return), the project's
// .ai/tools, mcp/<server>/<tool> for each server of its mcp.yaml (whose
// tools are known only when it runs) and the graphs the project holds,
// which a tool action runs as a child graph. names are the tool ids, for
// suggestions; problems says, one line each, what of the project could
// not be read, as Known does.
func GraphTools(files fs.FS) (known func(id string) bool, names []string, problems []string) {
	ids := map[string]bool{}
	add := func(id string) {
		names = append(names, id)
		for _, s := range tools.Spellings(id) {
			ids[s] = true
		}
	}
	for _, t := range tools.Builtins(tools.FSConfig{}) {
		add(t.Def().Name)
	}
	add(tools.ShellID)
	for _, id := range WorkerTools {
		add(id)
	}
	ext, err := tools.LoadExternal(files, tools.ExternalConfig{})
	if err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			problems = append(problems, "project tools: "+l)
		}
	}
	for _, t := range ext {
		add(t.Def().Name)
	}
	var servers []string
	mcp, err := config.LoadMCP(files)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if mcp != nil {
		for s := range mcp.Servers {
			servers = append(servers, "mcp/"+s+"/")
		}
	}
	known = func(id string) bool {
		if ids[id] {
			return true
		}
		slashed := strings.ReplaceAll(strings.ReplaceAll(id, "__", "/"), ".", "/")
		for _, s := range servers {
			if strings.HasPrefix(slashed, s) && len(slashed) > len(s) {
				return true
			}
		}
		_, _, err := orchestrator.FindGraph(files, id)
		return err == nil
	}
	return known, names, problems
}
