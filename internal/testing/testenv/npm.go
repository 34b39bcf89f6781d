package testenv

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// npmPackage is an npm package a test runs with node: the pinned version,
// the cache directory it is installed in, the entry point inside it, and
// the variable that names that entry point instead (set by .ci/run).
type npmPackage struct {
	name    string // @scope/name
	version string
	dir     string // directory under <user cache>/spool-test/
	entry   string // path of the entry point under node_modules/<name>/
	env     string // variable naming the entry point, installed elsewhere
}

// find returns node and the package's entry point: the one the variable
// names when set; else the copy installed under the user's cache
// directory, installed there with npm the first time (one install at a
// time across test binaries).
func (p npmPackage) find() (node, entry string, err error) {
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", fmt.Errorf("node is not on PATH")
	}
	if entry := os.Getenv(p.env); entry != "" {
		if _, err := os.Stat(entry); err != nil {
			return "", "", fmt.Errorf("%s: %w", p.env, err)
		}
		return node, entry, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(cache, "spool-test", p.dir)
	entry = filepath.Join(dir, "node_modules", p.name, p.entry)
	if _, err := os.Stat(entry); err == nil {
		return node, entry, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "", fmt.Errorf("%s is not installed in %s and npm is not on PATH", p.name, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", err
	}
	if _, err := os.Stat(entry); err == nil {
		return node, entry, nil
	}
	cmd := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "error", p.name+"@"+p.version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("npm install %s@%s: %w\n%s", p.name, p.version, err, out)
	}
	if _, err := os.Stat(entry); err != nil {
		return "", "", fmt.Errorf("npm installed %s but %s is missing", p.name, entry)
	}
	return node, entry, nil
}

// NodePackages installs the devDependencies of the package.json at path
// (exact versions) once into the user's cache directory
// (spool-test/<name>-<hash of them>) and returns that node_modules, for a
// test that builds and tests JavaScript code without writing into the
// checkout. Without node and npm (or with a failed install) the test
// skips, or fails under SPOOL_TEST_REQUIRE_REAL=1.
func NodePackages(t testing.TB, name, path string) string {
	t.Helper()
	fail := func(err error) string {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no node packages for %s: %v", name, err)
		}
		t.Skipf("testenv: no node packages for %s: %v", name, err)
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail(err)
	}
	var pkg struct {
		Dev map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	specs := make([]string, 0, len(pkg.Dev))
	for n, v := range pkg.Dev {
		specs = append(specs, n+"@"+v)
	}
	sort.Strings(specs)
	sum := sha256.Sum256([]byte(strings.Join(specs, " ")))
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fail(fmt.Errorf("%s is not on PATH", tool))
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return fail(err)
	}
	dir := filepath.Join(cache, "spool-test", fmt.Sprintf("%s-%x", name, sum[:6]))
	done := filepath.Join(dir, ".installed")
	if _, err := os.Stat(done); err == nil {
		return filepath.Join(dir, "node_modules")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fail(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(done); err != nil {
		args := append([]string{"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "error"}, specs...)
		if out, err := exec.Command("npm", args...).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("npm install %v: %w\n%s", specs, err, out))
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return fail(err)
		}
	}
	return filepath.Join(dir, "node_modules")
}
