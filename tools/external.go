package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/internal/yamlstrict"
	"github.com/spool-run/spool/spawn"
	"github.com/spool-run/spool/thread"
)

// ExternalConfig tunes external tools. The zero value gives the defaults.
type ExternalConfig struct {
	// Dir is the bundle directory holding tools. Default ".ai/tools".
	Dir string
	// CacheDir is where executables from the bundle are materialised,
	// one file per content hash. Default <os.TempDir()>/spool-tools-<uid>.
	CacheDir string
	// Timeout is a call's default time limit; a manifest may set its own.
	// When it passes, the tool's whole process group is killed. Default 60 s.
	Timeout time.Duration
	// MaxTimeout caps a manifest's timeout. Default 30 min.
	MaxTimeout time.Duration
	// MaxStdoutBytes caps the captured stdout; a tool writing more gets an
	// error result. Default 4 MiB.
	MaxStdoutBytes int
	// StderrTailBytes is how much of the end of stderr an error result
	// quotes. Default 4 KiB.
	StderrTailBytes int
	// PassEnv names the variables copied from the worker's environment.
	// Default PATH, HOME, USER, LOGNAME, LANG, LC_ALL, TZ, SSL_CERT_FILE,
	// SSL_CERT_DIR, SPOOL_LOG_LEVEL, SPOOL_LOG_JSON. A credential is never
	// copied, whatever this says (see isCredential).
	PassEnv []string
	// PassEnvPrefixes copies every worker variable with one of these
	// prefixes, credentials excepted. Default none. A tool that starts
	// child threads (`spool thread run`) needs none of the worker's
	// settings: the worker serves the call a socket and a token for that
	// (Env.Children, package spawn). Provider keys, the Redis URL, the S3
	// and AWS credentials and the signing key stay with the worker; a tool
	// that needs a credential of its own gets it from its manifest's env.
	PassEnvPrefixes []string
	// MaxWorkspaceBytes and MaxWorkspaceFiles bound the workspace a call
	// runs in (copied to the worker's disk for it, as rye/bash's is).
	// Defaults 256 MiB and 10,000 files.
	MaxWorkspaceBytes int64
	MaxWorkspaceFiles int
	// FS gives the file size limit and the write leases with which the
	// files a call wrote are stored back.
	FS FSConfig
}

// WithDefaults returns c with zero fields set to their defaults.
func (c ExternalConfig) WithDefaults() ExternalConfig {
	if c.Dir == "" {
		c.Dir = ".ai/tools"
	}
	if c.CacheDir == "" {
		c.CacheDir = filepath.Join(os.TempDir(), "spool-tools-"+strconv.Itoa(os.Getuid()))
	}
	if c.Timeout <= 0 {
		c.Timeout = 60 * time.Second
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 30 * time.Minute
	}
	if c.MaxStdoutBytes <= 0 {
		c.MaxStdoutBytes = 4 << 20
	}
	if c.StderrTailBytes <= 0 {
		c.StderrTailBytes = 4 << 10
	}
	if c.PassEnv == nil {
		c.PassEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR",
			"SPOOL_LOG_LEVEL", "SPOOL_LOG_JSON"}
	}
	if c.MaxWorkspaceBytes <= 0 {
		c.MaxWorkspaceBytes = defaultMaxWorkspaceBytes
	}
	if c.MaxWorkspaceFiles <= 0 {
		c.MaxWorkspaceFiles = defaultMaxWorkspaceFiles
	}
	c.FS = c.FS.WithDefaults()
	return c
}

// manifest is the YAML file declaring an external tool.
type manifest struct {
	// ID defaults to the manifest's path under Dir without extension.
	ID          string `yaml:"id"`
	Description string `yaml:"description"`
	// InputSchema is a JSON Schema object; default {"type":"object"}.
	InputSchema any `yaml:"input_schema"`
	// Executable is relative to the manifest's directory; default the one
	// sibling file with the manifest's base name and another extension.
	Executable string `yaml:"executable"`
	// Command is accepted as another name for Executable.
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Timeout seconds           `yaml:"timeout"` // 30, 1.5 or "90s"
	Env     map[string]string `yaml:"env"`
}

// seconds decodes a YAML number of seconds or a Go duration string.
type seconds time.Duration

func (s *seconds) UnmarshalYAML(n *yaml.Node) error {
	if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
		*s = seconds(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("timeout %q: want seconds (30) or a duration (90s)", n.Value)
	}
	*s = seconds(d)
	return nil
}

const defaultSchema = `{"type":"object"}`

// isGraphFile reports whether the YAML file p is a graph (top-level
// tool_type: graph), which the reference keeps among its tools: a graph
// is run by graph runs, never read as a tool's manifest.
func isGraphFile(files fs.FS, p string) bool {
	b, err := fs.ReadFile(files, p)
	if err != nil {
		return false
	}
	var head struct {
		ToolType string `yaml:"tool_type"`
	}
	return yaml.Unmarshal(b, &head) == nil && head.ToolType == "graph"
}

// LoadExternal finds the external tools of a bundle under cfg.Dir (zero cfg:
// defaults): every manifest (*.yaml, *.yml) and every bare executable no
// manifest names (see the package doc). A bundle without the directory has
// no external tools. Every problem found is reported, joined, one line each;
// no tools are returned then. Executables are read from files when called.
// A graph kept among the tools (isGraphFile) is not a tool.
func LoadExternal(files fs.FS, cfg ExternalConfig) ([]Tool, error) {
	cfg = cfg.WithDefaults()
	dir := path.Clean(cfg.Dir)
	if _, err := fs.Stat(files, dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	manifests, others, err := bundleFiles(files, dir)
	if err != nil {
		return nil, fmt.Errorf("load external tools from %s: %w", dir, err)
	}
	cache := &exeCache{dir: cfg.CacheDir}
	var errs []error
	var tools []*extTool
	named := map[string]bool{}
	for _, mp := range manifests {
		if isGraphFile(files, mp) {
			continue // a graph kept among the tools (package graph), not a tool
		}
		t, err := loadManifest(files, dir, mp, others, cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("external tool %s: %w", mp, err))
			continue
		}
		t.cache = cache
		named[t.exe] = true
		tools = append(tools, t)
	}
	for _, p := range others {
		if named[p] {
			continue
		}
		t, err := bareTool(files, dir, p, cfg)
		if err != nil {
			errs = append(errs, fmt.Errorf("external tool %s: %w", p, err))
			continue
		}
		if t == nil {
			continue // a helper or data file
		}
		t.cache = cache
		tools = append(tools, t)
	}
	errs = append(errs, duplicateIDs(tools)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].id < tools[j].id })
	out := make([]Tool, len(tools))
	for i, t := range tools {
		out[i] = t
	}
	return out, nil
}

// bundleFiles walks the tools directory dir of files and sorts its files
// into manifests (*.yaml, *.yml) and others (executables, helpers, data),
// in walk order. A hidden file or directory below dir is skipped whole.
func bundleFiles(files fs.FS, dir string) (manifests, others []string, err error) {
	err = fs.WalkDir(files, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		switch path.Ext(p) {
		case ".yaml", ".yml":
			manifests = append(manifests, p)
		default:
			others = append(others, p)
		}
		return nil
	})
	return manifests, others, err
}

// bareTool is the tool of the file p no manifest names: its id is its path
// under dir without extension, its schema the default, its timeout cfg's.
// A file that is not executable is no tool (nil, a helper or data file).
func bareTool(files fs.FS, dir, p string, cfg ExternalConfig) (*extTool, error) {
	ok, err := isExecutable(files, p)
	if err != nil || !ok {
		return nil, err
	}
	rel := strings.TrimPrefix(p, dir+"/")
	id := strings.TrimSuffix(rel, path.Ext(rel))
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	return &extTool{
		id: id, desc: "Project tool " + id + " (" + rel + ").", schema: json.RawMessage(defaultSchema),
		exe: p, timeout: cfg.Timeout, files: files, cfg: cfg,
	}, nil
}

// duplicateIDs reports each tool whose id an earlier one of tools declares
// already, one error each.
func duplicateIDs(tools []*extTool) []error {
	var errs []error
	seen := map[string]string{}
	for _, t := range tools {
		if other, ok := seen[t.id]; ok {
			errs = append(errs, fmt.Errorf("external tool %s: id %q is also declared by %s", t.exe, t.id, other))
		}
		seen[t.id] = t.exe
	}
	return errs
}

// loadManifest reads the manifest mp of the tools directory dir into its
// tool: the id, the executable (named, or the one sibling among others),
// the input schema, the timeout (capped by cfg.MaxTimeout) and the
// description, each checked in that order.
func loadManifest(files fs.FS, dir, mp string, others []string, cfg ExternalConfig) (*extTool, error) {
	m, err := readManifest(files, mp)
	if err != nil {
		return nil, err
	}
	rel := strings.TrimPrefix(mp, dir+"/")
	if m.ID == "" {
		m.ID = strings.TrimSuffix(rel, path.Ext(rel))
	}
	if err := ValidateID(m.ID); err != nil {
		return nil, err
	}
	exePath, err := manifestExecutable(files, dir, mp, m, others)
	if err != nil {
		return nil, err
	}
	schema, err := manifestSchema(m.InputSchema)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if m.Timeout < 0 {
		return nil, errors.New("timeout: must be positive")
	}
	if m.Timeout > 0 {
		timeout = min(time.Duration(m.Timeout), cfg.MaxTimeout)
	}
	desc := strings.TrimSpace(m.Description)
	if desc == "" {
		desc = "Project tool " + m.ID + "."
	}
	return &extTool{
		id: m.ID, desc: desc, schema: schema, exe: exePath, args: m.Args,
		timeout: timeout, env: m.Env, files: files, cfg: cfg,
	}, nil
}

// readManifest decodes the manifest file mp, refusing a key the manifest
// does not know.
func readManifest(files fs.FS, mp string) (manifest, error) {
	var m manifest
	data, err := fs.ReadFile(files, mp)
	if err != nil {
		return m, err
	}
	if err := yamlstrict.Decode(data, &m); err != nil {
		return m, fmt.Errorf("parse: %w", err)
	}
	return m, nil
}

// manifestExecutable is the path in files of the executable the manifest
// mp names (executable, or command, which must agree), or, when it names
// none, of the one file among others beside it with its base name.
func manifestExecutable(files fs.FS, dir, mp string, m manifest, others []string) (string, error) {
	if m.Executable != "" && m.Command != "" && m.Executable != m.Command {
		return "", errors.New("executable and command disagree; give one")
	}
	exe := m.Executable
	if exe == "" {
		exe = m.Command
	}
	if exe == "" {
		return siblingExecutable(mp, others)
	}
	if strings.HasPrefix(exe, "/") || strings.Contains(exe, `\`) {
		return "", fmt.Errorf("executable %q: must be a path relative to the manifest", exe)
	}
	exePath := path.Join(path.Dir(mp), exe)
	if !strings.HasPrefix(exePath, dir+"/") {
		return "", fmt.Errorf("executable %q: outside %s", exe, dir)
	}
	if st, err := fs.Stat(files, exePath); err != nil || st.IsDir() {
		return "", fmt.Errorf("executable %q: not a file in the bundle", exe)
	}
	return exePath, nil
}

// siblingExecutable is the one file among others named as the manifest mp
// is, with another extension or none; none or several is an error asking
// for the executable to be set.
func siblingExecutable(mp string, others []string) (string, error) {
	stem := strings.TrimSuffix(mp, path.Ext(mp))
	var cands []string
	for _, o := range others {
		if o == stem || strings.TrimSuffix(o, path.Ext(o)) == stem {
			cands = append(cands, o)
		}
	}
	if len(cands) != 1 {
		return "", fmt.Errorf("no executable given and %d files named %s.* beside it; set executable", len(cands), path.Base(stem))
	}
	return cands[0], nil
}

// manifestSchema is the manifest's input_schema as JSON, the default
// schema when it gives none; anything but an object is refused.
func manifestSchema(in any) (json.RawMessage, error) {
	if in == nil {
		return json.RawMessage(defaultSchema), nil
	}
	obj, ok := in.(map[string]any)
	if !ok {
		return nil, errors.New("input_schema: want a JSON Schema object")
	}
	schema, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	return schema, nil
}

// isExecutable: an x bit in the bundle's mode, or a "#!" first line.
func isExecutable(files fs.FS, p string) (bool, error) {
	st, err := fs.Stat(files, p)
	if err != nil {
		return false, err
	}
	if st.Mode()&0o111 != 0 {
		return true, nil
	}
	f, err := files.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var head [2]byte
	n, _ := f.Read(head[:])
	return n == 2 && string(head[:]) == "#!", nil
}

// extTool is one external tool of a bundle.
type extTool struct {
	id, desc string
	schema   json.RawMessage
	exe      string // path in files
	args     []string
	timeout  time.Duration
	env      map[string]string
	files    fs.FS
	cfg      ExternalConfig
	cache    *exeCache
}

func (t *extTool) Def() thread.ToolDef {
	return thread.ToolDef{Name: t.id, Description: t.desc, InputSchema: t.schema}
}

// call is what an external tool reads on stdin.
type call struct {
	Tool           string          `json:"tool"`
	Input          json.RawMessage `json:"input"`
	ThreadID       string          `json:"thread_id"`
	ParentThreadID string          `json:"parent_thread_id,omitempty"`
	TreeID         string          `json:"tree_id,omitempty"`
}

// Run calls the tool: the call on stdin, in a fresh work directory, with
// the environment environ builds and a spawn socket when the thread may
// start children, under the tool's timeout. A tool that fails, times out
// or answers badly is an error result the model sees; only a cancelled ctx
// or a call that cannot be prepared is an error.
func (t *extTool) Run(ctx context.Context, env *Env, input json.RawMessage) (Result, error) {
	if env == nil {
		env = &Env{}
	}
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage("{}")
	}
	if !json.Valid(input) {
		return errorResult(fmt.Sprintf("bad input for %s: not valid JSON", t.id)), nil
	}
	stdin, err := json.Marshal(call{Tool: t.id, Input: input, ThreadID: env.ThreadID, ParentThreadID: env.ParentID, TreeID: env.TreeID})
	if err != nil {
		return Result{}, fmt.Errorf("encode call: %w", err)
	}
	exe, err := t.cache.materialise(t.files, t.exe)
	if err != nil {
		return Result{}, err
	}
	sealEnviron()
	wd, res, err := t.workDir(ctx, env)
	if err != nil || res != nil {
		return derefResult(res), err
	}
	defer wd.close()
	spawnEnv, stop := t.spawnSocket(env, wd.tmp)
	defer stop()

	tctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	stdout := &capWriter{max: t.cfg.MaxStdoutBytes}
	stderr := &tailWriter{max: t.cfg.StderrTailBytes}
	start := time.Now()
	// The tool dies with this thread (dieWithWorker): it stays this
	// goroutine's from the fork to the end of the wait.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd, err := t.start(tctx, exe, wd.dir, t.environ(env, wd.tmp, spawnEnv), stdin, stdout, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("tool %s: %w", t.id, ctx.Err())
		}
		return errorResult(fmt.Sprintf("tool %s could not start: %v", t.id, err)), nil
	}
	err = cmd.Wait()
	_ = killGroup(cmd.Process.Pid) // stragglers it left in its group
	log := env.logger().With("thread_id", env.ThreadID, "tool", t.id)
	log.Debug("external tool ran", "duration_ms", time.Since(start).Milliseconds(), "err", err)

	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("tool %s: %w", t.id, ctx.Err())
	}
	out := t.outcome(tctx, err, stdout, stderr)
	if wd.shared && tctx.Err() == nil {
		// It ran to its end: what it wrote goes to the workspace.
		if _, res, err := wd.writeBack(ctx, env); err != nil || res != nil {
			return derefResult(res), err
		}
	}
	return out, nil
}

// workDir is the call's working directory: a copy of the tree's
// workspace, whose files the call writes or changes are stored back
// (shared), when env has one; else an empty directory of its own.
func (t *extTool) workDir(ctx context.Context, env *Env) (*workDir, *Result, error) {
	if needWorkspace(env) == nil {
		wd, res, err := openWorkDir(ctx, env, workLimits{maxBytes: t.cfg.MaxWorkspaceBytes, maxFiles: t.cfg.MaxWorkspaceFiles, fs: t.cfg.FS}, t.id)
		if wd != nil {
			wd.shared = true
		}
		return wd, res, err
	}
	return emptyWorkDir(t.id)
}

// spawnSocket serves the call a spawn socket in work when the thread may
// start children (env.Children): the variables that tell the tool where it
// is, and the function that stops it. Without its socket the tool still
// runs; only starting a child from it fails (the CLI then finds neither
// socket nor Redis).
func (t *extTool) spawnSocket(env *Env, work string) (map[string]string, func()) {
	if env.Children == nil {
		return nil, func() {}
	}
	vars, stop, err := spawn.Serve(work, env.Children, env.logger())
	if err != nil {
		env.logger().Warn("no spawn socket for the tool", "thread_id", env.ThreadID, "tool", t.id, "error", err)
		return nil, func() {}
	}
	return vars, stop
}

// start starts the tool's process in its own process group, tied to the
// calling thread (dieWithWorker), in work, with
// environ, reading stdin and writing to stdout and stderr; ending tctx
// kills the whole group. A start that fails with "text file busy" (the
// executable just written, still held open for writing by a concurrent
// fork: isTextBusy) is tried again, 20 times at most, waiting a little
// longer each time.
func (t *extTool) start(tctx context.Context, exe, work string, environ []string, stdin []byte, stdout, stderr io.Writer) (*exec.Cmd, error) {
	for attempt := 0; ; attempt++ {
		cmd := exec.CommandContext(tctx, exe, t.args...)
		cmd.Dir = work
		cmd.Env = environ
		cmd.Stdin = bytes.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		setProcGroup(cmd)
		dieWithWorker(cmd)
		cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
		cmd.WaitDelay = 2 * time.Second
		err := cmd.Start()
		if err == nil || !isTextBusy(err) || attempt == 20 {
			return cmd, err
		}
		time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
	}
}

// outcome is the result of a tool that ran to its end (err from its wait):
// an error result when it timed out (tctx), wrote too much, failed, or
// wrote no valid result, and otherwise the result it wrote to stdout.
func (t *extTool) outcome(tctx context.Context, err error, stdout *capWriter, stderr *tailWriter) Result {
	if errors.Is(tctx.Err(), context.DeadlineExceeded) {
		return errorResult(fmt.Sprintf("tool %s timed out after %s and was killed%s", t.id, t.timeout, stderr.quote()))
	}
	if stdout.over {
		return errorResult(fmt.Sprintf("tool %s wrote more than %d bytes to stdout", t.id, t.cfg.MaxStdoutBytes))
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		msg := fmt.Sprintf("tool %s failed: %v", t.id, exitErr)
		if out, _, ok := parseOutput(stdout.buf.Bytes()); ok && out != "" {
			msg += "\noutput: " + out
		}
		return errorResult(msg + stderr.quote())
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		return errorResult(fmt.Sprintf("tool %s: %v%s", t.id, err, stderr.quote()))
	}
	out, isErr, ok := parseOutput(stdout.buf.Bytes())
	if !ok {
		return errorResult(fmt.Sprintf("tool %s wrote no valid JSON result to stdout (want {\"output\": \"...\"}); stdout began: %q%s",
			t.id, clip(stdout.buf.String(), 200), stderr.quote()))
	}
	return Result{Output: out, IsError: isErr}
}

// parseOutput reads a tool's stdout: {"output": ..., "is_error": bool} gives
// output (a non-string output as compact JSON); a JSON string is its text;
// any other JSON value is the output as written. ok is false for empty or
// invalid JSON.
func parseOutput(b []byte) (out string, isErr, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || !json.Valid(b) {
		return "", false, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) == nil {
		if raw, has := obj["output"]; has {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				var buf bytes.Buffer
				_ = json.Compact(&buf, raw)
				s = buf.String()
			}
			var e bool
			_ = json.Unmarshal(obj["is_error"], &e)
			return s, e, true
		}
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		return s, false, true
	}
	return string(b), false, true
}

// environ builds the tool's environment: the passed worker variables (no
// credential among them), the manifest's env, Env.Env, then the spawn
// socket and the thread ids (which nothing overrides).
func (t *extTool) environ(env *Env, tmp string, spawnEnv map[string]string) []string {
	vars := t.cfg.passed()
	vars["TMPDIR"] = tmp
	for k, v := range t.env {
		vars[k] = v
	}
	for k, v := range env.Env {
		vars[k] = v
	}
	for k, v := range spawnEnv {
		vars[k] = v
	}
	vars["RYE_PARENT_THREAD_ID"] = env.ThreadID
	vars["SPOOL_THREAD_ID"] = env.ThreadID
	vars["SPOOL_TREE_ID"] = env.TreeID
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// passed are the worker's variables c passes to a tool's process
// (PassEnv, PassEnvPrefixes), credentials never.
func (c ExternalConfig) passed() map[string]string {
	vars := map[string]string{}
	for _, k := range c.PassEnv {
		if v, ok := os.LookupEnv(k); ok && !isCredential(k) {
			vars[k] = v
		}
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range c.PassEnvPrefixes {
			if strings.HasPrefix(k, p) && !isCredential(k) {
				vars[k] = v
			}
		}
	}
	return vars
}

// credentialNames are worker variables that hold a credential, or say
// where one is, and never reach a tool from the worker's environment.
var credentialNames = map[string]bool{
	"SPOOL_REDIS_URL":   true, // may hold the Redis password
	"SPOOL_SIGNING_KEY": true, // the private key's path
	"AWS_ACCESS_KEY_ID": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_SESSION_TOKEN": true,
	"AWS_WEB_IDENTITY_TOKEN_FILE": true, "AWS_SHARED_CREDENTIALS_FILE": true, "AWS_CONTAINER_CREDENTIALS_FULL_URI": true,
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": true, "AWS_CONTAINER_AUTHORIZATION_TOKEN": true,
	// An OTLP exporter's headers usually carry the collector's key.
	"OTEL_EXPORTER_OTLP_HEADERS": true, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": true, "OTEL_EXPORTER_OTLP_METRICS_HEADERS": true,
	"OTEL_EXPORTER_OTLP_LOGS_HEADERS": true,
}

// credentialWords mark a variable name as a credential wherever they
// appear in it (ANTHROPIC_API_KEY, SPOOL_MONITOR_TOKEN, DB_PASSWORD, ...).
var credentialWords = []string{"PASSWORD", "PASSWD", "SECRET", "TOKEN", "API_KEY", "APIKEY", "PRIVATE", "CREDENTIAL", "AUTH"}

// IsCredential reports whether the worker variable name holds or locates
// a credential (the Redis URL, S3 and AWS credentials, the signing key,
// any name with PASSWORD, SECRET, TOKEN, API_KEY, PRIVATE, CREDENTIAL or
// AUTH in it): the processes a worker starts for a project (external
// tools, MCP servers) never get such a variable from its environment.
func IsCredential(name string) bool { return isCredential(name) }

// isCredential reports whether the worker variable k holds or locates a
// credential: such a variable is never copied to a tool (PassEnv and
// PassEnvPrefixes notwithstanding).
func isCredential(k string) bool {
	if credentialNames[k] {
		return true
	}
	up := strings.ToUpper(k)
	for _, w := range credentialWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// exeCache materialises bundle executables as local files named by content
// hash, so a worker runs what the enqueuer bundled, written once per content.
type exeCache struct {
	dir  string
	mu   sync.Mutex
	done map[string]string // hash -> verified local path
}

func (c *exeCache) materialise(files fs.FS, p string) (string, error) {
	data, err := fs.ReadFile(files, p)
	if err != nil {
		return "", fmt.Errorf("read tool executable %s from the bundle: %w", p, err)
	}
	st, err := fs.Stat(files, p)
	if err != nil {
		return "", fmt.Errorf("stat tool executable %s: %w", p, err)
	}
	mode := st.Mode().Perm() | 0o500 // whatever the bundle kept, the owner can run it
	sum := sha256.Sum256(append(data, byte(mode>>8), byte(mode)))
	hash := hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = map[string]string{}
	}
	if local, ok := c.done[hash]; ok {
		return local, nil
	}
	dir := filepath.Join(c.dir, hash[:32])
	local := filepath.Join(dir, path.Base(p))
	if got, err := os.ReadFile(local); err == nil && bytes.Equal(got, data) {
		if fi, err := os.Stat(local); err == nil && fi.Mode().Perm() == mode {
			c.done[hash] = local
			return local, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("tool cache: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return "", fmt.Errorf("tool cache: %w", err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), mode)); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("tool cache: write %s: %w", p, err)
	}
	if err := os.Rename(f.Name(), local); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("tool cache: %w", err)
	}
	c.done[hash] = local
	return local, nil
}

// capWriter keeps the first max bytes and notes whether more came.
type capWriter struct {
	max  int
	buf  bytes.Buffer
	over bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room < len(p) {
		w.over = true
		w.buf.Write(p[:max(room, 0)])
	} else {
		w.buf.Write(p)
	}
	return len(p), nil
}

// tailWriter keeps the last max bytes.
type tailWriter struct {
	max int
	buf []byte
	cut bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
		w.cut = true
	}
	return len(p), nil
}

// quote renders the stderr tail for an error result ("" when empty).
func (w *tailWriter) quote() string {
	s := strings.TrimSpace(string(w.buf))
	if s == "" {
		return ""
	}
	if w.cut {
		return fmt.Sprintf("\nstderr (last %d bytes):\n%s", w.max, s)
	}
	return "\nstderr:\n" + s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeCutBefore(s, n)] + "…"
}
