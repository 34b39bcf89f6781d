package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spawn"
	"github.com/spool-run/spool/stack"
	"github.com/spool-run/spool/telemetry/otlp"
	"github.com/spool-run/spool/transcript"
)

// usageError is bad usage: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// exitError carries an explicit exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func isFlagError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "flag provided but not defined") || strings.HasPrefix(s, "invalid value") ||
		strings.HasPrefix(s, "Required flag") || strings.HasPrefix(s, "No help topic") ||
		strings.Contains(s, "flag needs an argument") || strings.HasPrefix(s, "invalid boolean")
}

// oneLine folds a multi-line error onto one line. The lines after the
// first often say what is wrong (yaml's "unmarshal errors:\n  line 27:
// field latency not found"), so they are kept, not cut.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// --version prints what `spool version` prints. cli.VersionPrinter is a
// package global: it is set once here, never per app, so apps built in
// parallel (the tests) do not race on it.
func init() {
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, readBuildVersion()) }
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "spool",
		Usage:     "run LLM agent threads as a distributed job queue",
		Version:   readBuildVersion().Version,
		Writer:    stdout,
		ErrWriter: stderr,
		// A repeatable flag takes one value per use (--input k=v
		// --input k2=v2): a comma is part of the value, as in --input
		// "names=Ada, Bob" or --set items='["a","b"]'.
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "project", EnvVars: []string{"SPOOL_PROJECT"}, Usage: "project root holding .ai/ (default: current directory)"},
			&cli.StringFlag{Name: "data-dir", EnvVars: []string{"SPOOL_DATA_DIR"}, Usage: "local blob store and embedded state (default: <project>/.spool)"},
			&cli.StringFlag{Name: "redis-url", EnvVars: []string{"SPOOL_REDIS_URL"}, Usage: "redis://, rediss://, redis-sentinel:// or redis-cluster:// (unset: embedded)"},
			&cli.StringFlag{Name: "namespace", EnvVars: []string{"SPOOL_NAMESPACE"}, Value: "spool", Usage: "namespace of spool's Redis keys"},
			&cli.IntFlag{Name: "redis-shards", EnvVars: []string{"SPOOL_REDIS_SHARDS"}, Usage: "shards of spool's Redis keys, a power of two (default: 32 on a Redis Cluster, else 1); fixed when a namespace is first used"},
			&cli.StringFlag{Name: "signing-key", EnvVars: []string{"SPOOL_SIGNING_KEY"}, Usage: "Ed25519 private key (default: <data-dir>/keys/)"},
			&cli.StringFlag{Name: "log-level", EnvVars: []string{"SPOOL_LOG_LEVEL"}, Value: "warn", Usage: "debug, info, warn or error"},
			&cli.BoolFlag{Name: "log-json", EnvVars: []string{"SPOOL_LOG_JSON"}, Usage: "structured JSON logs"},
			&cli.DurationFlag{Name: "lease-ttl", EnvVars: []string{"SPOOL_LEASE_TTL"}, Value: 10 * time.Second, Usage: "activation lease: a killed worker's thread is recovered after about this long"},
		},
		Commands: []*cli.Command{
			devCommand(), workerCommand(), schedulerCommand(), monitorCommand(), apiCommand(), mcpCommand(), keysCommand(),
			threadCommand(), graphCommand(), bulkCommand(), webhookCommand(), queueCommand(), budgetCommand(), costCommand(), directiveCommand(), admissionCommand(), tenantCommand(), versionCommand(),
		},
		OnUsageError: func(c *cli.Context, err error, sub bool) error {
			return &usageError{msg: err.Error() + flagHint(err, c.App.Flags, "")}
		},
		Before: func(c *cli.Context) error {
			if _, err := logLevel(c); err != nil {
				return err
			}
			// go-redis logs dial failures on stderr by itself; the error
			// that reaches the user says it once.
			redis.SetLogger(redisLogger{logger(c)})
			return nil
		},
		CommandNotFound: func(c *cli.Context, name string) {
			cmds, path := c.App.Commands, ""
			if c.Command != nil && len(c.Command.Subcommands) > 0 {
				cmds, path = c.Command.Subcommands, commandPath(c)
			}
			fmt.Fprintf(c.App.ErrWriter, "spool: unknown command %q%s\n", name, commandHint(name, cmds, path))
			os.Exit(2)
		},
	}
	app.HideHelpCommand = true
	setUsageErrors(app.Commands)
	return app
}

// setUsageErrors makes a bad flag of any command a usageError (exit 2, one
// line on stderr), instead of urfave/cli's "Incorrect Usage" and help text
// on stdout, which would break --json output.
func setUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = func(ctx *cli.Context, err error, _ bool) error {
				return &usageError{msg: err.Error() + flagHint(err, c.Flags, commandPath(ctx))}
			}
		}
		setUsageErrors(c.Subcommands)
	}
}

// flagHint follows urfave/cli's "flag provided but not defined: -listen"
// with the flag of flags that is a likely misspelling of it ("did you
// mean --addr?"), else with where the command's flags are listed. Other
// usage errors get nothing.
func flagHint(err error, flags []cli.Flag, path string) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	name = strings.TrimLeft(name, "-")
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	if near := spelling.Nearest(name, names); near != "" && len(name) > 1 {
		return " (did you mean --" + near + "?)"
	}
	return " (spool " + strings.TrimSpace(path+" --help") + " lists the flags)"
}

// commandHint is " (did you mean thread?)" for a command name that is a
// likely misspelling of one of cmds, else where they are listed.
func commandHint(name string, cmds []*cli.Command, path string) string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Names()...)
		}
	}
	if near := spelling.Nearest(name, names); near != "" {
		return " (did you mean " + strings.TrimSpace(path+" "+near) + "?)"
	}
	return " (spool " + strings.TrimSpace(path+" --help") + " lists the commands)"
}

// commandPath is the command's name as typed, e.g. "thread show".
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}

// noArgs refuses positional arguments for a command that takes none.
func noArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("%s takes no arguments (got %q)", commandPath(c), c.Args().First())
	}
	return nil
}

// redisLogger sends go-redis's own messages to the logger at debug level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// logger builds the process logger from the global flags.
func logger(c *cli.Context) *slog.Logger { return loggerTo(c, c.App.ErrWriter) }

// loggerTo is logger writing to w.
func loggerTo(c *cli.Context, w io.Writer) *slog.Logger {
	lvl, err := logLevel(c)
	if err != nil {
		lvl = slog.LevelWarn // refused before any command runs (Before)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Bool("log-json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logLevel is --log-level; a bad one is bad usage.
func logLevel(c *cli.Context) (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	return lvl, nil
}

func projectDir(c *cli.Context) (string, error) {
	p := c.String("project")
	if p == "" {
		p = "."
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, nil
}

// existingProject is projectDir, refused (bad usage) when it is not a
// directory: for a command that reads the project, or makes its data dir
// in it. A server given SPOOL_DATA_DIR needs no project (a worker reads
// its threads' bundles from the store), so projectDir does not check.
func existingProject(c *cli.Context) (string, error) {
	p, err := projectDir(c)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return "", usagef("--project %s: not a directory", c.String("project"))
	}
	return p, nil
}

func dataDir(c *cli.Context) (string, error) {
	if d := c.String("data-dir"); d != "" {
		return filepath.Abs(d)
	}
	// A mistyped --project (or SPOOL_PROJECT) is no place to make a
	// .spool data dir in.
	p, err := existingProject(c)
	if err != nil {
		return "", err
	}
	return filepath.Join(p, ".spool"), nil
}

// services are the connections a command uses.
type services struct {
	log      *slog.Logger
	rdb      redis.UniversalClient
	embedded *stack.Embedded
	store    blobstore.Store
	client   *asynq.Client
	orch     *orchestrator.Orchestrator
	project  string
	dataDir  string
	// userDir is the user space bundled beside the project when a root
	// thread starts: the home directory ("" without one).
	userDir string
	// joinedDev: an --embedded run found a `spool dev` running on the
	// data dir and uses its Redis.
	joinedDev bool
	// tel exports the command's spans (and a server's metrics) when the
	// OTEL_* variables ask for it; Close flushes it.
	tel *otlp.Telemetry
	// notices holds what starting the embedded Redis logged, with
	// openOpts.holdNotices, until the command printed its result.
	notices bytes.Buffer
}

func (s *services) Close() {
	if s.client != nil {
		_ = s.client.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	s.embedded.Stop()
	if s.tel != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.tel.Shutdown(ctx); err != nil {
			s.log.Warn("opentelemetry: not all spans or metrics were exported", "error", err)
		}
	}
}

// openOpts say how a command may get its Redis.
type openOpts struct {
	// startEmbedded: with no Redis configured, start one (dev, --embedded).
	startEmbedded bool
	// joinDev: with startEmbedded, use the Redis of a `spool dev` running
	// on the data dir instead (a second redis-server on its data dir
	// would split the data); services.joinedDev says it did.
	joinDev bool
	// readOnly: the command signs nothing, so trusted public keys (the key
	// dir's *.pub, SPOOL_TRUSTED_KEYS) suffice without the signing key.
	readOnly bool
	// holdNotices: what starting an embedded Redis logs (the in-memory
	// miniredis notice) waits in services.notices, printed only when the
	// command succeeds: a failure is one line on stderr.
	holdNotices bool
	// noEmbedded: with no Redis configured and no `spool dev` running,
	// refuse instead of opening the data dir's embedded Redis for the
	// command: a server (its work would never reach a worker), or a
	// `thread run` without --embedded (its thread would wait for one).
	noEmbedded bool
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// redisURLFile is where `spool dev` leaves the URL of its embedded Redis so
// that other commands in the same project find it.
func redisURLFile(dataDir string) string { return filepath.Join(dataDir, "redis.url") }

// openServices connects to Redis and the blob store and loads the keys:
// it checks the settings, finds the Redis (redisURL), starts the data
// dir's embedded one when that is the one, connects to it (connect) and
// opens the rest on it (open).
func openServices(c *cli.Context, o openOpts) (*services, error) {
	if err := checkServiceSettings(c); err != nil {
		return nil, err
	}
	log := logger(c)
	proj, err := projectDir(c)
	if err != nil {
		return nil, err
	}
	dd, err := dataDir(c)
	if err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	s := &services{log: log, project: proj, dataDir: dd, userDir: home}
	if spawn.FromEnv() != nil {
		// A tool process of a worker: its thread's workspace is no data
		// dir, and it is given no Redis on purpose (package spawn).
		o.noEmbedded = true
	}
	url, ofDev, err := s.redisURL(c, &o)
	if err != nil {
		return nil, err
	}
	if url == "" || (o.startEmbedded && c.String("redis-url") == "" && !s.joinedDev) {
		if url, err = s.startEmbedded(c, o); err != nil {
			return nil, err
		}
	}
	ks, err := s.connect(c, url)
	if err != nil {
		s.Close()
		return nil, err
	}
	if err := s.open(c, o, ks, url, ofDev); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkServiceSettings refuses, as bad usage (exit 2, as a bad flag is),
// a lease TTL under a second and a malformed or half S3 setting.
func checkServiceSettings(c *cli.Context) error {
	if c.Duration("lease-ttl") < time.Second {
		return usagef("--lease-ttl %s: must be at least 1s", c.Duration("lease-ttl"))
	}
	if os.Getenv("SPOOL_S3_BUCKET") != "" {
		if _, err := blobstore.S3ConfigFromEnv(); err != nil {
			return usagef("%v", err)
		}
	} else if os.Getenv("SPOOL_S3_ENDPOINT") != "" {
		// Meant for S3, the process would keep transcripts on its own disk.
		return usagef("SPOOL_S3_ENDPOINT is set but SPOOL_S3_BUCKET is not: set the bucket, or unset SPOOL_S3_ENDPOINT for the local store")
	}
	return nil
}

// redisURL is the Redis the command uses, "" for the data dir's embedded
// one (which openServices starts): --redis-url; else, unless o says to
// start an embedded Redis, a `spool dev`'s on the data dir (devRedis);
// else, with o.joinDev, a running dev's (ofDev: the URL is a running
// dev's). It may set o.startEmbedded.
func (s *services) redisURL(c *cli.Context, o *openOpts) (url string, ofDev bool, err error) {
	url = c.String("redis-url")
	if url == "" && !o.startEmbedded {
		if url, err = s.devRedis(c, o); err != nil {
			return "", false, err
		}
		ofDev = url != ""
	}
	if url == "" && o.joinDev {
		u, alive, err := runningDev(c.Context, redisURLFile(s.dataDir))
		if err != nil {
			return "", false, err
		}
		if alive {
			fmt.Fprintf(c.App.ErrWriter, "spool: spool dev is running on %s: --embedded uses its Redis (%s)\n", s.dataDir, stack.RedactURL(u))
			url, s.joinedDev, ofDev = u, true, true
		}
	}
	return url, ofDev, nil
}

// devRedis is the Redis of a `spool dev` running on the data dir; else
// (none, or a killed dev's URL file) "" and o.startEmbedded set: the data
// dir's embedded Redis, where --embedded runs keep their threads (CLI.md:
// unset → embedded), unless there is none to use.
func (s *services) devRedis(c *cli.Context, o *openOpts) (string, error) {
	u, alive, err := runningDev(c.Context, redisURLFile(s.dataDir))
	switch {
	case err != nil:
		return "", err
	case alive || (u != "" && o.noEmbedded):
		return u, nil
	case o.noEmbedded || !stack.HasRedisServer() || !exists(filepath.Join(s.dataDir, "redis")):
		// Without redis-server the embedded Redis keeps nothing
		// between processes, and a data dir where none ran holds
		// nothing: there would be nothing to read (and a mistyped
		// directory would get a .spool).
		return "", errors.New("no Redis: set SPOOL_REDIS_URL (or --redis-url), run `spool dev`, or use `spool thread run --embedded`")
	}
	o.startEmbedded = true
	return "", nil
}

// startEmbedded starts the data dir's embedded Redis and returns its URL;
// with o.holdNotices what it logs waits in s.notices.
func (s *services) startEmbedded(c *cli.Context, o openOpts) (string, error) {
	if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
		return "", err
	}
	startLog := s.log
	if o.holdNotices {
		startLog = loggerTo(c, &s.notices)
	}
	emb, err := stack.StartEmbedded(s.dataDir, startLog)
	if err != nil {
		return "", err
	}
	s.embedded = emb
	return emb.URL, nil
}

// connect opens the Redis at url, pings it and reads (or records) the
// namespace's key layout.
func (s *services) connect(c *cli.Context, url string) (keyspace.Space, error) {
	var err error
	if s.rdb, err = stack.OpenRedis(url); err != nil { // it dials nothing: the URL is malformed
		return keyspace.Space{}, usagef("%v", err)
	}
	pingCtx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	if err := s.rdb.Ping(pingCtx).Err(); err != nil {
		return keyspace.Space{}, stack.MaskURLError(url, fmt.Errorf("redis %s: %w", stack.RedactURL(url), err))
	}
	ks, err := orchestrator.Layout(pingCtx, s.rdb, keyspace.New(c.String("namespace")), redisShards(c, s.rdb), c.IsSet("redis-shards"))
	if err != nil {
		return keyspace.Space{}, usagef("%v", err)
	}
	return ks, nil
}

// open opens what runs on the Redis: the blob store, the keys, tracing,
// the asynq client and the orchestrator, and notes where the command runs
// (whereKey).
func (s *services) open(c *cli.Context, o openOpts, ks keyspace.Space, url string, ofDev bool) error {
	var err error
	if s.store, err = stack.OpenBlobStore(c.Context, s.dataDir); err != nil {
		return err
	}
	signer, keyring, err := loadKeys(c, s.dataDir, s.embedded != nil || c.String("redis-url") == "", o.readOnly)
	if err != nil {
		return err
	}
	// Tracing only when the OTEL_* variables ask for it (telemetry/otlp).
	if s.tel, err = otlp.Setup(c.Context, otlp.Config{ServiceVersion: readBuildVersion().Version}); err != nil {
		return usagef("%v", err)
	}
	if c.App.Metadata == nil {
		c.App.Metadata = map[string]any{}
	}
	c.App.Metadata[whereKey] = s.where(c, url, ofDev)
	s.client = asynq.NewClientFromRedisClient(s.rdb)
	s.orch, err = orchestrator.New(orchestrator.Config{Namespace: c.String("namespace"), Shards: ks.Shards(), Logger: s.log,
		LeaseTTL: c.Duration("lease-ttl"), Tracing: s.tel.TracerProvider()}, s.rdb, s.store, &orchestrator.Enqueuer{Client: s.client}, signer, keyring)
	if err == nil && driftCommands[commandPath(c)] {
		warnPolicyDrift(c, s)
	}
	return err
}

// redisShards is the shard count asked for: --redis-shards, else the
// default for rdb's topology.
func redisShards(c *cli.Context, rdb redis.UniversalClient) int {
	if c.IsSet("redis-shards") {
		return c.Int("redis-shards")
	}
	return orchestrator.DefaultShards(rdb)
}

// loadKeys loads the signing key and the trusted public keys. With
// autoCreate (local, zero-setup runs) a missing key pair is made in the
// data dir. With readOnly (a command or server that signs nothing) the
// private key is neither needed nor made: the signer is nil, the keyring
// is the key dir's *.pub and SPOOL_TRUSTED_KEYS (plus the public half of
// the signing key when one is there and readable), and with no key at all
// it is transcript.UnverifiedKeyring, whose readers say "unverified".
func loadKeys(c *cli.Context, dd string, autoCreate, readOnly bool) (*transcript.Signer, *transcript.Keyring, error) {
	path, err := signingKeyPath(c, dd, autoCreate, readOnly)
	if err != nil {
		return nil, nil, err
	}
	signer, err := transcript.LoadKey(path)
	if err != nil && !readOnly { // read-only: its public half is a .pub file, or a trusted key
		return nil, nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	keyring, err := loadKeyring(path, signer, readOnly)
	if err != nil {
		return nil, nil, err
	}
	if !readOnly {
		return signer, keyring, nil
	}
	if len(keyring.IDs()) == 0 {
		keyring = transcript.UnverifiedKeyring()
	}
	return nil, keyring, nil
}

// signingKeyPath is where the signing key is: --signing-key, else the
// data dir's key file, which, when it is missing and keys are needed, is
// made with autoCreate and refused without.
func signingKeyPath(c *cli.Context, dd string, autoCreate, readOnly bool) (string, error) {
	if path := c.String("signing-key"); path != "" {
		return path, nil
	}
	keyDir := filepath.Join(dd, "keys")
	path := filepath.Join(keyDir, transcript.SigningKeyFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !readOnly {
		if !autoCreate {
			return "", fmt.Errorf("no signing key at %s: run `spool keys init` or set SPOOL_SIGNING_KEY", path)
		}
		if _, _, err := transcript.InitKeys(keyDir, false); err != nil {
			return "", err
		}
	}
	return path, nil
}

// loadKeyring is the trusted public keys: those of the signing key's
// directory (path, or the directory it is in) with signer's (when it
// loaded), then those of SPOOL_TRUSTED_KEYS. With readOnly a key dir
// without keys is an empty keyring; otherwise it is an error, which says
// there is no signing key either when signer is nil.
func loadKeyring(path string, signer *transcript.Signer, readOnly bool) (*transcript.Keyring, error) {
	var signers []*transcript.Signer
	if signer != nil {
		signers = append(signers, signer)
	}
	keyDirOf := path
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		keyDirOf = filepath.Dir(path)
	}
	keyring, err := transcript.LoadKeyring(keyDirOf, signers...)
	switch {
	case err == nil:
	case readOnly && (errors.Is(err, os.ErrNotExist) || errors.Is(err, transcript.ErrNoTrustedKeys)):
		keyring = transcript.NewKeyring() // SPOOL_TRUSTED_KEYS below, or none
	case signer != nil:
		return nil, err
	default:
		return nil, fmt.Errorf("no signing key at %s, no trusted public keys: %w", path, err)
	}
	if extra := os.Getenv("SPOOL_TRUSTED_KEYS"); extra != "" {
		more, err := transcript.LoadKeyring(extra)
		if err != nil {
			return nil, err
		}
		keyring.Merge(more)
	}
	return keyring, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
