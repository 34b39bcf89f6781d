//go:build unix

package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/spawn"
)

func sh(body string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte("#!/bin/sh\n" + body + "\n"), Mode: 0o755}
}

func file(data string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(data), Mode: 0o644} }

type extSetup struct {
	reg *Registry
	env *Env
}

func setupExternal(t *testing.T, files fstest.MapFS, cfg ExternalConfig) extSetup {
	t.Helper()
	cfg.CacheDir = t.TempDir()
	tools, err := LoadExternal(files, cfg)
	require.NoError(t, err)
	reg, err := NewRegistry(tools...)
	require.NoError(t, err)
	return extSetup{reg: reg, env: &Env{ThreadID: "th-child", ParentID: "th-root", TreeID: "th-root"}}
}

func (s extSetup) call(t *testing.T, id, input string) Result {
	t.Helper()
	tool, ok := s.reg.Lookup(id)
	require.True(t, ok, "tool %s not loaded; have %v", id, s.reg.IDs())
	r, err := tool.Run(context.Background(), s.env, json.RawMessage(input))
	require.NoError(t, err)
	return r
}

func TestExternalHappyPath(t *testing.T) {
	t.Parallel()
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/acme/greet.yaml": file(`
description: Greets someone.
input_schema:
  type: object
  properties:
    name: {type: string}
  required: [name]
executable: greet.sh
args: ["--loud"]
timeout: 10
env: {GREETING: hello}
`),
		// No x bit in the bundle: the manifest says it is the executable.
		".ai/tools/acme/greet.sh": {Data: []byte(`#!/bin/sh
call=$(cat)
printf '{"output": {"call": %s, "arg": "%s", "greeting": "%s", "pwd_files": "%s", "tmpdir_is_pwd": "%s"}}' \
  "$call" "$1" "$GREETING" "$(ls -A)" "$([ "$TMPDIR" = "$PWD" ] && echo yes)"
`), Mode: 0o644},
		".ai/tools/acme/README.md": file("not a tool"),
	}, ExternalConfig{})
	require.Equal(t, []string{"acme/greet"}, s.reg.IDs())
	def := s.reg.Defs(nil)[0]
	require.Equal(t, "Greets someone.", def.Description)
	require.JSONEq(t, `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`, string(def.InputSchema))

	r := s.call(t, "acme/greet", `{"name": "Ada"}`)
	require.False(t, r.IsError, r.Output)
	var got struct {
		Call struct {
			Tool           string          `json:"tool"`
			Input          json.RawMessage `json:"input"`
			ThreadID       string          `json:"thread_id"`
			ParentThreadID string          `json:"parent_thread_id"`
			TreeID         string          `json:"tree_id"`
		} `json:"call"`
		Arg         string `json:"arg"`
		Greeting    string `json:"greeting"`
		PwdFiles    string `json:"pwd_files"`
		TmpdirIsPwd string `json:"tmpdir_is_pwd"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Output), &got), r.Output)
	require.Equal(t, "acme/greet", got.Call.Tool)
	require.JSONEq(t, `{"name":"Ada"}`, string(got.Call.Input))
	require.Equal(t, "th-child", got.Call.ThreadID)
	require.Equal(t, "th-root", got.Call.ParentThreadID)
	require.Equal(t, "th-root", got.Call.TreeID)
	require.Equal(t, "--loud", got.Arg)
	require.Equal(t, "hello", got.Greeting)
	require.Equal(t, "", got.PwdFiles, "without a workspace, a fresh, empty working directory")
	require.Equal(t, "", got.TmpdirIsPwd, "TMPDIR is a directory beside it, never stored back")

	// Called again: same materialised file (cache by content hash).
	r2 := s.call(t, "acme/greet", `{"name": "Ada"}`)
	require.Equal(t, r.Output, r2.Output)
}

func TestExternalResults(t *testing.T) {
	t.Parallel()
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/hello.sh":        sh(`cat >/dev/null; echo '"hi there"'`),
		".ai/tools/num":             sh(`echo ' [1, 2] '`),
		".ai/tools/soft_fail.sh":    sh(`echo '{"output": "no such user", "is_error": true}'`),
		".ai/tools/bad_json.sh":     sh(`echo 'this is not json'; echo 'warning: x' >&2`),
		".ai/tools/empty.sh":        sh(`true`),
		".ai/tools/crash.sh":        sh(`echo '{"output": "partial"}'; echo 'line 1' >&2; echo 'boom: disk full' >&2; exit 3`),
		".ai/tools/chatty.sh":       sh(`head -c 5000 /dev/zero | tr '\0' a`),
		".ai/tools/noexec.sh":       sh(`echo '"x"'`),
		".ai/tools/sub/no_read.sh":  sh(`echo '"ignored stdin"'`),
		".ai/tools/.hidden.sh":      sh(`echo '"hidden"'`),
		".ai/tools/data.json":       file(`{"not": "a tool"}`),
		".ai/tools/lib/helper.py":   file("def f(): pass\n"),
		".ai/tools/shebang_only.py": file("#!/bin/sh\necho '\"via shebang\"'\n"),
	}, ExternalConfig{MaxStdoutBytes: 1000})
	require.Equal(t, []string{"bad_json", "chatty", "crash", "empty", "hello", "noexec", "num", "shebang_only", "soft_fail", "sub/no_read"}, s.reg.IDs())

	tests := []struct {
		id     string
		want   string // exact output, or substrings separated by |
		exact  bool
		isErr  bool
		denied string
	}{
		{id: "hello", want: "hi there", exact: true},
		{id: "num", want: "[1, 2]", exact: true},
		{id: "soft_fail", want: "no such user", exact: true, isErr: true},
		{id: "shebang_only", want: "via shebang", exact: true},
		{id: "sub/no_read", want: "ignored stdin", exact: true},
		{id: "bad_json", want: `wrote no valid JSON result|"this is not json\n"|stderr:|warning: x`, isErr: true},
		{id: "empty", want: "wrote no valid JSON result", isErr: true},
		{id: "crash", want: "exit status 3|output: partial|boom: disk full", isErr: true},
		{id: "chatty", want: "more than 1000 bytes", isErr: true},
	}
	for _, tt := range tests {
		r := s.call(t, tt.id, `{}`)
		require.Equal(t, tt.isErr, r.IsError, "%s: %s", tt.id, r.Output)
		if tt.exact {
			require.Equal(t, tt.want, r.Output, tt.id)
			continue
		}
		for _, sub := range strings.Split(tt.want, "|") {
			require.Contains(t, r.Output, sub, tt.id)
		}
	}
	r := s.call(t, "hello", `{not json`)
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "not valid JSON")
}

func TestExternalStderrTail(t *testing.T) {
	t.Parallel()
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/loud.sh": sh(`i=0; while [ $i -lt 200 ]; do echo "noise $i" >&2; i=$((i+1)); done; echo 'the real cause' >&2; exit 1`),
	}, ExternalConfig{StderrTailBytes: 64})
	r := s.call(t, "loud", `{}`)
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "stderr (last 64 bytes)")
	require.Contains(t, r.Output, "the real cause")
	require.NotContains(t, r.Output, "noise 1\n")
	require.Less(t, len(r.Output), 300)
}

// TestExternalTimeoutKillsGroup: past its timeout the tool's whole process
// group dies, including a background child that would outlive a plain kill.
func TestExternalTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/slow.yaml": file("timeout: 300ms\n"),
		".ai/tools/slow.sh":   sh(`sleep 300 & echo $! > "$PIDFILE"; echo started >&2; wait`),
	}, ExternalConfig{})
	s.env.Env = map[string]string{"PIDFILE": pidFile}
	r := s.call(t, "slow", `{}`)
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "timed out after 300ms and was killed")
	require.Contains(t, r.Output, "started")

	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	// The grandchild was SIGKILLed with the group: gone, or a zombie
	// waiting for a reaper (some containers' PID 1 reaps slowly).
	require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond)
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Field 3 is the state; Z is a zombie (dead, not yet reaped).
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestExternalCancelIsInfrastructureError(t *testing.T) {
	t.Parallel()
	s := setupExternal(t, fstest.MapFS{".ai/tools/slow.sh": sh(`sleep 300`)}, ExternalConfig{})
	tool, _ := s.reg.Lookup("slow")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, err := tool.Run(ctx, s.env, json.RawMessage(`{}`))
	require.ErrorIs(t, err, context.Canceled)
}

// TestExternalEnv is not parallel: it sets worker environment variables.
func TestExternalEnv(t *testing.T) {
	t.Setenv("SPOOL_REDIS_URL", "redis://example:6379")
	t.Setenv("ANTHROPIC_API_KEY", "sk-secret")
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/env.yaml": file("env: {RYE_PARENT_THREAD_ID: from-manifest, FROM_MANIFEST: m}\n"),
		".ai/tools/env.sh":   sh(`printf '{"output": "parent=%s redis=%s key=%s manifest=%s extra=%s thread=%s"}' "$RYE_PARENT_THREAD_ID" "$SPOOL_REDIS_URL" "$ANTHROPIC_API_KEY" "$FROM_MANIFEST" "$EXTRA" "$SPOOL_THREAD_ID"`),
	}, ExternalConfig{})
	s.env.Env = map[string]string{"RYE_PARENT_THREAD_ID": "from-env", "EXTRA": "e"}
	r := s.call(t, "env", `{}`)
	require.False(t, r.IsError, r.Output)
	require.Equal(t, "parent=th-child redis= key= manifest=m extra=e thread=th-child", r.Output)
}

// childStarter is a spawn.Handler that records what it is asked.
type childStarter struct {
	parent string
	asked  []spawn.Request
}

func (c *childStarter) Start(_ context.Context, req spawn.Request) (any, error) {
	c.asked = append(c.asked, req)
	return map[string]any{"thread_id": req.Directive + "-1-x", "parent_id": c.parent}, nil
}

func (c *childStarter) Wait(context.Context, []string, time.Duration) (any, error) {
	return map[string]any{}, nil
}

// TestExternalToolStartsChildWithoutSecrets (issue 13, item 6): no
// credential of the worker reaches a tool's environment, not even with
// prefixes that match them, yet the tool can still start a child of the
// calling thread, through the socket and token of its call (Env.Children,
// package spawn), which die with the call. Not parallel: it sets worker
// variables.
func TestExternalToolStartsChildWithoutSecrets(t *testing.T) {
	secrets := map[string]string{
		"SPOOL_REDIS_URL":             "redis://:redis-pw-1@redis:6379/0",
		"SPOOL_SIGNING_KEY":           "/etc/spool/keys/signing-key-path",
		"SPOOL_MONITOR_TOKEN":         "monitor-token-2",
		"SPOOL_MONITOR_BASIC_AUTH":    "admin:basic-pw-3",
		"AWS_ACCESS_KEY_ID":           "AKIAEXAMPLE4",
		"AWS_SECRET_ACCESS_KEY":       "aws-secret/with+chars=5",
		"AWS_SESSION_TOKEN":           "aws-session-6",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/secrets/web-identity-7",
		"ANTHROPIC_API_KEY":           "sk-ant-8",
		"OPENAI_API_KEY":              "sk-oai-9",
		"DATABASE_PASSWORD":           "db-pw-10",
		"GITHUB_TOKEN":                "ghp-11",
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-collector-key=otel-12",
	}
	harmless := map[string]string{"SPOOL_LOG_LEVEL": "debug", "SPOOL_NAMESPACE": "tenant-a", "AWS_REGION": "eu-west-1"}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for k, v := range harmless {
		t.Setenv(k, v)
	}
	self, err := os.Executable()
	require.NoError(t, err)
	envFile := filepath.Join(t.TempDir(), "env")
	tools := fstest.MapFS{
		".ai/tools/spawn.sh": sh(`env -0 > "$ENVFILE"; exec "$HELPER"`),
	}
	for name, cfg := range map[string]ExternalConfig{
		"defaults": {},
		// Even an operator who passes everything by prefix passes no secret.
		"every prefix": {PassEnvPrefixes: []string{"SPOOL_", "AWS_", "ANTHROPIC_", "OPENAI_", "DATABASE_", "GITHUB_", "OTEL_"}},
	} {
		s := setupExternal(t, tools, cfg)
		children := &childStarter{parent: s.env.ThreadID}
		s.env.Children = children
		s.env.Env = map[string]string{"ENVFILE": envFile, "HELPER": self, spawnHelperEnv: "1"}
		r := s.call(t, "spawn", `{}`)
		require.False(t, r.IsError, "%s: %s", name, r.Output)
		require.JSONEq(t, `{"thread_id": "t/child-1-x", "parent_id": "th-child"}`, r.Output, name)
		require.Len(t, children.asked, 1, name)
		require.Equal(t, spawn.Request{Directive: "t/child", Inputs: map[string]any{"n": float64(1)}}, children.asked[0])

		raw, err := os.ReadFile(envFile)
		require.NoError(t, err)
		seen := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			seen[k] = v
		}
		for k, v := range secrets {
			_, ok := seen[k]
			require.False(t, ok, "%s: %s reaches the tool", name, k)
			require.NotContains(t, string(raw), v, "%s: the value of %s reaches the tool", name, k)
		}
		require.Equal(t, "debug", seen["SPOOL_LOG_LEVEL"], name)
		require.Equal(t, "th-child", seen["RYE_PARENT_THREAD_ID"], "%s: a thread the tool starts is a child of the caller", name)
		require.Equal(t, "th-child", seen["SPOOL_THREAD_ID"])
		require.Equal(t, "th-root", seen["SPOOL_TREE_ID"])
		require.Len(t, seen[spawn.TokenEnv], 64, name)
		require.NoFileExists(t, seen[spawn.SocketEnv], "%s: the socket closes with the call", name)

		// Everything the tool sees is accounted for: the passed worker
		// variables, the call's own, and what /bin/sh adds itself.
		allowed := map[string]bool{"TMPDIR": true, "ENVFILE": true, "HELPER": true, spawnHelperEnv: true, "RYE_PARENT_THREAD_ID": true,
			"SPOOL_THREAD_ID": true, "SPOOL_TREE_ID": true, spawn.SocketEnv: true, spawn.TokenEnv: true, "PWD": true, "OLDPWD": true, "SHLVL": true, "_": true}
		for _, k := range cfg.WithDefaults().PassEnv {
			allowed[k] = true
		}
		for k := range seen {
			if allowed[k] || name == "every prefix" && slices.ContainsFunc(cfg.PassEnvPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
				continue
			}
			t.Errorf("%s: the tool sees %s, which is neither passed on purpose nor the call's own", name, k)
		}
	}
}

func TestLoadExternalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"bad yaml", fstest.MapFS{".ai/tools/a.yaml": file("id: [\n"), ".ai/tools/a.sh": sh("")}, "a.yaml: parse"},
		{"unknown field", fstest.MapFS{".ai/tools/a.yaml": file("exe: a.sh\n"), ".ai/tools/a.sh": sh("")}, "parse: line 1: unknown key exe (expected id, description"},
		{"bad id", fstest.MapFS{".ai/tools/a.yaml": file("id: a.b\n"), ".ai/tools/a.sh": sh("")}, `bad tool id "a.b"`},
		{"bare bad id", fstest.MapFS{".ai/tools/my tool.sh": sh("")}, `bad tool id "my tool"`},
		{"outside", fstest.MapFS{".ai/tools/a.yaml": file("executable: ../../x.sh\n"), ".ai/x.sh": sh("")}, "outside .ai/tools"},
		{"absolute", fstest.MapFS{".ai/tools/a.yaml": file("executable: /bin/sh\n")}, "relative to the manifest"},
		{"missing", fstest.MapFS{".ai/tools/a.yaml": file("executable: nope.sh\n")}, "not a file in the bundle"},
		{"no sibling", fstest.MapFS{".ai/tools/a.yaml": file("description: x\n")}, "no executable given and 0 files"},
		{"two siblings", fstest.MapFS{".ai/tools/a.yaml": file("description: x\n"), ".ai/tools/a.sh": sh(""), ".ai/tools/a.py": sh("")}, "no executable given and 2 files"},
		{"schema", fstest.MapFS{".ai/tools/a.yaml": file("input_schema: [1]\n"), ".ai/tools/a.sh": sh("")}, "input_schema: want a JSON Schema object"},
		{"timeout", fstest.MapFS{".ai/tools/a.yaml": file("timeout: soon\n"), ".ai/tools/a.sh": sh("")}, `timeout "soon"`},
		{"duplicate", fstest.MapFS{".ai/tools/a.yaml": file("id: b\nexecutable: a.sh\n"), ".ai/tools/a.sh": sh(""), ".ai/tools/b.sh": sh("")}, `id "b" is also declared`},
	}
	for _, tt := range tests {
		_, err := LoadExternal(tt.files, ExternalConfig{})
		require.ErrorContains(t, err, tt.want, tt.name)
	}

	// Several problems are all reported.
	_, err := LoadExternal(fstest.MapFS{".ai/tools/a.yaml": file("id: a.b\n"), ".ai/tools/b.yaml": file("exe: 1\n")}, ExternalConfig{})
	require.ErrorContains(t, err, "a.yaml")
	require.ErrorContains(t, err, "b.yaml")

	// No tools directory: no tools, no error.
	tools, err := LoadExternal(fstest.MapFS{".ai/directives/x.md": file("x")}, ExternalConfig{})
	require.NoError(t, err)
	require.Empty(t, tools)
}

func TestExternalManifestDefaults(t *testing.T) {
	t.Parallel()
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/scraping/gmaps/scrape.yml": file("description: Scrape.\ntimeout: 2.5\n"),
		".ai/tools/scraping/gmaps/scrape.sh":  sh(`echo '{"output": 42}'`),
	}, ExternalConfig{})
	require.Equal(t, []string{"scraping/gmaps/scrape"}, s.reg.IDs())
	tool, _ := s.reg.Lookup("rye.scraping.gmaps.scrape") // not an alias: ids do not gain a rye. prefix
	require.Nil(t, tool)
	tool, ok := s.reg.Lookup("scraping.gmaps.scrape")
	require.True(t, ok)
	require.Equal(t, 2500*time.Millisecond, tool.(*extTool).timeout)
	require.JSONEq(t, defaultSchema, string(tool.Def().InputSchema))
	r := s.call(t, "scraping/gmaps/scrape", `{}`)
	require.Equal(t, Result{Output: "42"}, r)
}

func TestExternalCacheRewritesTamperedFile(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{".ai/tools/t.sh": sh(`echo '"original"'`)}
	cache := t.TempDir()
	c := &exeCache{dir: cache}
	local, err := c.materialise(files, ".ai/tools/t.sh")
	require.NoError(t, err)
	fi, err := os.Stat(local)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	require.NoError(t, os.WriteFile(local, []byte("#!/bin/sh\necho '\"evil\"'\n"), 0o755))

	// A new cache (another worker process) checks the content it finds.
	tools, err := LoadExternal(files, ExternalConfig{CacheDir: cache})
	require.NoError(t, err)
	r, err := tools[0].Run(context.Background(), &Env{ThreadID: "th"}, nil)
	require.NoError(t, err)
	require.Equal(t, "original", r.Output)
}

// TestExternalWorksInTheWorkspace: a project tool's working directory is
// a copy of the tree's workspace (what fs_write and rye/bash wrote is
// there), the files it writes or changes are stored back, TMPDIR is not
// stored back, and a call
// that times out stores nothing.
func TestExternalWorksInTheWorkspace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupExternal(t, fstest.MapFS{
		".ai/tools/acme/upper.yaml": file("description: upper-cases in.txt\nexecutable: upper.sh\ntimeout: 1\n"),
		".ai/tools/acme/upper.sh": {Data: []byte(`#!/bin/sh
call=$(cat)
case "$call" in *slow*) echo late > late.txt; sleep 10;; esac
mkdir -p out && tr a-z A-Z < in.txt > out/up.txt
echo same > keep.txt
echo scratch > "$TMPDIR/scratch.txt"
printf '{"output": "%s"}' "$(cat out/up.txt)"
`), Mode: 0o755},
	}, ExternalConfig{Timeout: time.Second})
	store := blobstore.NewMemory()
	s.env.Store = store
	require.NoError(t, store.Put(ctx, blobkey.WorkspaceFile("th-root", "in.txt"), []byte("alpha\n")))
	require.NoError(t, store.Put(ctx, blobkey.WorkspaceFile("th-root", "keep.txt"), []byte("same\n")))

	r := s.call(t, "acme/upper", `{}`)
	require.False(t, r.IsError, r.Output)
	require.Equal(t, "ALPHA", r.Output)
	b, err := store.Get(ctx, blobkey.WorkspaceFile("th-root", "out/up.txt"))
	require.NoError(t, err)
	require.Equal(t, "ALPHA\n", string(b))
	infos, err := store.List(ctx, blobkey.WorkspaceFiles("th-root"))
	require.NoError(t, err)
	require.Len(t, infos, 3, "in.txt, keep.txt, out/up.txt: not TMPDIR's scratch.txt")

	r = s.call(t, "acme/upper", `{"slow": true}`)
	require.True(t, r.IsError)
	require.Contains(t, r.Output, "timed out")
	_, err = store.Get(ctx, blobkey.WorkspaceFile("th-root", "late.txt"))
	require.ErrorIs(t, err, blobstore.ErrNotFound, "a call that timed out stores nothing")
}
