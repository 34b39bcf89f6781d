package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
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
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node is not on PATH")
	}
	if entry := os.Getenv("SPOOL_TEST_MCP_EVERYTHING"); entry != "" {
		if _, err := os.Stat(entry); err != nil {
			return nil, fmt.Errorf("SPOOL_TEST_MCP_EVERYTHING: %w", err)
		}
		return &MCPServer{Node: node, Entry: entry}, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "spool-test", "mcp-everything-"+EverythingVersion)
	entry := filepath.Join(dir, "node_modules", everythingPackage, "dist", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return &MCPServer{Node: node, Entry: entry}, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, fmt.Errorf("%s is not installed in %s and npm is not on PATH", everythingPackage, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// One install at a time across test binaries.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	if _, err := os.Stat(entry); err == nil {
		return &MCPServer{Node: node, Entry: entry}, nil
	}
	cmd := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "error",
		everythingPackage+"@"+EverythingVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("npm install %s@%s: %w\n%s", everythingPackage, EverythingVersion, err, out)
	}
	if _, err := os.Stat(entry); err != nil {
		return nil, fmt.Errorf("npm installed %s but %s is missing", everythingPackage, entry)
	}
	return &MCPServer{Node: node, Entry: entry}, nil
}
