package launch

import (
	"io/fs"
	"strings"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/tools"
)

// WorkerTools are the item ids of the tools the worker implements itself
// (thread_directive, orchestrator, directive_return); a test of package
// worker keeps the list in step with it.
var WorkerTools = []string{
	"rye/agent/threads/thread_directive",
	"rye/agent/threads/orchestrator",
	"rye/agent/threads/directive_return",
}

// Known is what a project holds that a directive's capabilities name
// (directive.Lint): the built-in tools, the project's .ai/tools, the MCP
// servers of its mcp.yaml and the directives r finds. files is the
// project's root (its directory, or a bundle). problems says, one line
// each, what of the project could not be read (a tool manifest or an
// mcp.yaml that does not load, which fails every thread that runs there);
// what was read is known all the same.
func Known(files fs.FS, r *directive.Resolver) (known directive.Known, problems []string) {
	for _, t := range tools.Builtins(tools.FSConfig{}) {
		known.Tools = append(known.Tools, t.Def().Name)
	}
	known.Tools = append(known.Tools, tools.ShellID)
	known.Tools = append(known.Tools, WorkerTools...)
	ext, err := tools.LoadExternal(files, tools.ExternalConfig{})
	if err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			problems = append(problems, "project tools: "+l)
		}
	}
	for _, t := range ext {
		known.Tools = append(known.Tools, t.Def().Name)
	}
	mcp, err := config.LoadMCP(files)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if mcp != nil {
		for s := range mcp.Servers {
			known.MCPServers = append(known.MCPServers, s)
		}
	}
	names, err := r.Names()
	if err != nil {
		problems = append(problems, err.Error())
	}
	known.Directives = names
	return known, problems
}
