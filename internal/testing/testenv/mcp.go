package testenv

import (
	"sync"
	"testing"
)

// EverythingVersion is the version of the reference MCP server
// @modelcontextprotocol/server-everything the MCP tests run (.ci/run
// installs the same one).
const EverythingVersion = "2026.8.31"

// everythingPackage is the npm package of the reference MCP server.
const everythingPackage = "@modelcontextprotocol/server-everything"

// MCPServer is a real MCP server nobody here wrote, to run with node.
type MCPServer struct {
	// Node is the node executable.
	Node string
	// Entry is the server's entry point (dist/index.js): `node Entry`
	// serves stdio, `node Entry streamableHttp` streamable HTTP on $PORT.
	Entry string
}

var (
	everythingOnce sync.Once
	everything     *MCPServer
	everythingErr  error
)

// MCPEverything returns the reference MCP server
// @modelcontextprotocol/server-everything (EverythingVersion):
// SPOOL_TEST_MCP_EVERYTHING (its dist/index.js) when set; else the copy
// installed under the user's cache directory, installed there with npm
// the first time. Without node (or npm, for the first install) the test
// skips, or fails under SPOOL_TEST_REQUIRE_REAL=1.
func MCPEverything(t testing.TB) *MCPServer {
	t.Helper()
	everythingOnce.Do(func() { everything, everythingErr = findEverything() })
	if everythingErr != nil {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no MCP reference server: %v", everythingErr)
		}
		t.Skipf("testenv: no MCP reference server: %v", everythingErr)
	}
	return everything
}

func findEverything() (*MCPServer, error) {
	node, entry, err := npmPackage{name: everythingPackage, version: EverythingVersion, dir: "mcp-everything-" + EverythingVersion,
		entry: "dist/index.js", env: "SPOOL_TEST_MCP_EVERYTHING"}.find()
	if err != nil {
		return nil, err
	}
	return &MCPServer{Node: node, Entry: entry}, nil
}
