// Package redisfn runs spool's Lua scripts as Redis Functions (Redis 7:
// FUNCTION LOAD, FCALL), so that the Lua libraries they share
// (registry.lua, ledger.lua) are defined once, when the library is
// loaded, instead of on every call. It is the one way spool runs a
// script: each is a .lua file beside its Go caller, embedded and made a
// Script with New, and run with Script.Run on a Client.
//
// A script that starts with a library defines every function of its
// tables again each time EVALSHA runs it: for the checkpoint of a turn
// that cost Redis more than the commands the script then calls
// (BENCHMARKS.md, issue 20). A Script here is one Function library:
//
//	#!lua name=spool_<name>_<hash>
//	<prelude: registry.lua, ledger.lua ...>        run once, at FUNCTION LOAD
//	redis.register_function('spool_<name>_<hash>', function(KEYS, ARGV)
//	<body: the script as EVAL would run it>        run by each FCALL
//	end)
//
// The name carries a hash of the code, so workers of two versions (a
// rolling deploy) each call their own library, and a library once loaded
// never changes. A process records, at its first call of a function and
// then at most once an hour, that it uses the library
// (keyspace.FunctionsSeen); Prune, run by housekeeping, deletes the
// libraries of versions no process has used for days, which would
// otherwise stay in Redis with every deploy until an operator ran
// FUNCTION DELETE. Deleting one a process still uses costs that process
// one load: its next call finds the function missing and loads it again.
//
// Run calls the function; when Redis does not know it (a new server, a
// restart without persistence, FUNCTION FLUSH) it loads the library —
// on every master of a Cluster, once for all the calls of a client that
// found it missing at the same time — and calls again. Where Redis has no
// Functions (an older server, the embedded miniredis) or refuses to load
// one (an ACL without FUNCTION), the client falls back for good to the
// same code as one EVALSHA script, prelude and body together (a load that
// fails on the way, not refused, sends only that call there): the reply,
// the refusals and the atomicity are the same either way.
package redisfn

import (
	"context"
	"crypto/sha1" //nolint:gosec // a content name, as Redis names scripts
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/keyspace"
)

// Script is a Lua script run as a Redis Function where Redis has them.
type Script struct {
	fn   string        // the function's (and library's) name
	lib  string        // FUNCTION LOAD's code
	eval *redis.Script // the same code as one script, for the fallback
}

// New returns the script body after prelude: the prelude defines what
// the body calls (Lua locals and tables, no Redis commands: it runs when
// the library loads), the body is the script proper, with KEYS and ARGV,
// ending in a return. name is a short word for FUNCTION LIST and SLOWLOG.
func New(name, prelude, body string) *Script {
	sum := sha1.Sum([]byte(prelude + "\x00" + body)) //nolint:gosec // see the import
	fn := "spool_" + name + "_" + hex.EncodeToString(sum[:6])
	lib := "#!lua name=" + fn + "\n" + prelude +
		"\nredis.register_function('" + fn + "', function(KEYS, ARGV)\n" + body + "\nend)\n"
	return &Script{fn: fn, lib: lib, eval: redis.NewScript(prelude + "\n" + body)}
}

// Name is the function's name (FCALL's first argument).
func (s *Script) Name() string { return s.fn }

// Library is the code FUNCTION LOAD takes.
func (s *Script) Library() string { return s.lib }

// Run runs the script on c with keys and args, as redis.Script.Run does.
func (s *Script) Run(ctx context.Context, c *Client, keys []string, args ...any) *redis.Cmd {
	if c.evalOnly.Load() {
		return s.eval.Run(ctx, c, keys, args...)
	}
	fs := c.function(s.fn)
	loaded := &fs.loads
	gen := loaded.Load()
	cmd := c.FCall(ctx, s.fn, keys, args...)
	switch err := cmd.Err(); {
	case err == nil:
		fs.touch(ctx, c, s.fn)
		return cmd
	case unknownCommand(err):
		c.evalOnly.Store(true)
		return s.eval.Run(ctx, c, keys, args...)
	case !notFound(err):
		return cmd // the script's own refusal, or the connection's error
	}
	// One load per client at a time, and none when one ended since this
	// call was sent: a fleet's first calls all find the function missing,
	// and each FUNCTION LOAD compiles the library.
	_, err, _ := c.loads.Do(s.fn, func() (any, error) {
		if loaded.Load() != gen {
			return nil, nil
		}
		if err := s.load(ctx, c); err != nil {
			return nil, err
		}
		loaded.Add(1)
		return nil, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return cmd
		}
		var refused redis.Error
		if errors.As(err, &refused) {
			c.evalOnly.Store(true) // the server refuses FUNCTION (an ACL, a proxy): scripts as before
		}
		return s.eval.Run(ctx, c, keys, args...) // else a failed connection: this call as a script
	}
	cmd = c.FCall(ctx, s.fn, keys, args...)
	switch err := cmd.Err(); {
	case err == nil:
		fs.touch(ctx, c, s.fn)
	case notFound(err):
		// Loaded, yet not where the key lives (a slot moving): this call
		// as a script; the next one tries the function again.
		return s.eval.Run(ctx, c, keys, args...)
	}
	return cmd
}

// load loads the library on c's server, or on every master of a Cluster;
// one that another process loaded first is no failure.
func (s *Script) load(ctx context.Context, c redis.UniversalClient) error {
	return eachServer(ctx, c, func(ctx context.Context, c redis.Cmdable) error {
		if err := c.FunctionLoad(ctx, s.lib).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("function load %s: %w", s.fn, err)
		}
		return nil
	})
}

// eachServer runs fn on c's server, or on every master of a Cluster (at
// once): where Functions live.
func eachServer(ctx context.Context, c redis.UniversalClient, fn func(context.Context, redis.Cmdable) error) error {
	if sc, ok := c.(*Client); ok {
		c = sc.UniversalClient
	}
	base := autopipe.Unwrap(c)
	if cc, ok := base.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m) })
	}
	return fn(ctx, base)
}

// Client is a Redis client that runs Scripts: the client it wraps, and
// what that client's server has shown about Functions. Make one per Redis
// client and share it: the packages a process wires over one client
// (the orchestrator's registry, activations and ledger) take the same
// Client, so that the process loads each library once and records its
// use once.
type Client struct {
	redis.UniversalClient
	evalOnly atomic.Bool        // no Functions: every script by EVALSHA
	loads    singleflight.Group // FUNCTION LOADs under way, by function
	fns      sync.Map           // function → *fnState
}

// NewClient returns a Client over c, or c itself when it is one; nil for
// a nil c.
func NewClient(c redis.UniversalClient) *Client {
	switch c := c.(type) {
	case nil:
		return nil
	case *Client:
		return c
	default:
		return &Client{UniversalClient: c}
	}
}

// EvalOnly reports whether scripts run on c by EVALSHA (its server has
// no Functions, or refused to load one), for tests and benchmarks.
func (c *Client) EvalOnly() bool { return c.evalOnly.Load() }

// fnState is what a client did with one function.
type fnState struct {
	loads   atomic.Int64 // loads of its library this client made
	touched atomic.Int64 // when its use was last recorded (unix seconds)
}

// function is fn's state on this client.
func (c *Client) function(fn string) *fnState {
	if f, ok := c.fns.Load(fn); ok {
		return f.(*fnState)
	}
	f, _ := c.fns.LoadOrStore(fn, new(fnState))
	return f.(*fnState)
}

// touchEvery is how often a client records that it uses a library.
const touchEvery = time.Hour

// touch records in keyspace.FunctionsSeen that this process uses fn's
// library, at its first call and then at most once every touchEvery. It
// is best effort: a record that fails is made again touchEvery later,
// and Prune waits days.
func (f *fnState) touch(ctx context.Context, c redis.UniversalClient, fn string) {
	now := time.Now().Unix()
	last := f.touched.Load()
	if last != 0 && now-last < int64(touchEvery/time.Second) || !f.touched.CompareAndSwap(last, now) {
		return
	}
	_ = c.HSet(context.WithoutCancel(ctx), keyspace.FunctionsSeen, fn, now).Err()
}

// unknownCommand is a server without FCALL (Redis 6, miniredis).
func unknownCommand(err error) bool {
	return strings.HasPrefix(strings.ToLower(err.Error()), "err unknown command")
}

// notFound is FCALL of a function the server has not loaded.
func notFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}
