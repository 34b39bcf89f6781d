// Package luabatch runs several of spool's Lua scripts as one: one EVALSHA,
// one round trip, one atomic step in Redis.
//
// The registry, the ledger and the activations each own their scripts and
// the Go code that reads their replies. Some operations chain scripts of
// different owners, in an order that matters (a thread's end: charge the
// last turn, release the budget, commit the final status, look up the
// waiters, release the lease). Run composes those scripts into one script
// whose steps are the originals, unchanged, each called as a Lua function
// with its own KEYS and ARGV, so every owner keeps parsing its own reply.
//
// A step may stop the batch: it names the reply codes (the first element of
// its reply, or the reply itself when that is a string or a number) after
// which the next step runs; any other reply ends the batch there, exactly
// where a caller running the scripts one by one would have stopped on the
// error. Run returns the replies of the steps that ran.
//
// Every key of a batch must hash to one Redis Cluster slot; spool's keys do
// (keyspace: one hash tag per namespace). A redis.call error inside a step
// aborts the whole script, leaving the writes of the steps before it, as
// separate scripts would.
package luabatch

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script over KEYS and ARGV that can run alone (it embeds
// its *redis.Script) or as a step of a batch.
type Script struct {
	*redis.Script
	name, src string
}

// NewScript returns the script src, named name in batch scripts (a Lua
// identifier: letters, digits, underscores).
func NewScript(name, src string) *Script {
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			panic(fmt.Sprintf("luabatch: script name %q is not a Lua identifier", name))
		}
	}
	return &Script{Script: redis.NewScript(src), name: name, src: src}
}

// Name is the script's name.
func (s *Script) Name() string { return s.name }

// Step is one script of a batch with its keys and arguments.
type Step struct {
	Script *Script
	Keys   []string
	Args   []any
	// Proceed lists the reply codes after which the batch goes on; empty:
	// it always goes on.
	Proceed []string
}

// composed caches the batch script of each sequence of (script, proceed).
var composed sync.Map // string → *redis.Script

// Run runs steps as one script and returns their replies, one per step
// that ran (fewer than len(steps) when a step stopped the batch).
func Run(ctx context.Context, rdb redis.Scripter, steps ...Step) ([]any, error) {
	if len(steps) == 0 {
		return nil, nil
	}
	sig := signature(steps)
	v, ok := composed.Load(sig)
	if !ok {
		v, _ = composed.LoadOrStore(sig, redis.NewScript(compose(steps)))
	}
	nk, na := 0, 2*len(steps)
	for _, s := range steps {
		nk += len(s.Keys)
		na += len(s.Args)
	}
	keys := make([]string, 0, nk)
	args := make([]any, 0, na)
	for _, s := range steps {
		keys = append(keys, s.Keys...)
		args = append(args, len(s.Keys), len(s.Args))
	}
	for _, s := range steps {
		args = append(args, s.Args...)
	}
	res, err := v.(*redis.Script).Run(ctx, rdb, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	return res, nil
}

// signature identifies the batch script of steps.
func signature(steps []Step) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s.Script.name)
		b.WriteByte('/')
		b.WriteString(s.Script.Hash())
		for _, p := range s.Proceed {
			b.WriteByte(',')
			b.WriteString(strconv.Quote(p))
		}
		b.WriteByte(';')
	}
	return b.String()
}

// compose writes the batch script: each distinct script once as a local
// function of (KEYS, ARGV), then the steps in order. ARGV starts with the
// key and argument count of every step; then come the steps' arguments.
func compose(steps []Step) string {
	var b strings.Builder
	fn := map[*Script]string{}
	for _, s := range steps {
		if _, ok := fn[s.Script]; ok {
			continue
		}
		h := sha1.Sum([]byte(s.Script.src))
		name := "step_" + s.Script.name + "_" + hex.EncodeToString(h[:4])
		fn[s.Script] = name
		fmt.Fprintf(&b, "local function %s(KEYS, ARGV)\n%s\nend\n", name, s.Script.src)
	}
	fmt.Fprintf(&b, `local function slice(t, from, n)
  local r = {}
  for i = 1, n do r[i] = t[from + i - 1] end
  return r
end
local function code(r)
  if type(r) == 'table' then return r[1] end
  return r
end
local out = {}
local k, a = 1, %d
`, 2*len(steps)+1)
	for i, s := range steps {
		fmt.Fprintf(&b, `do
  local nk, na = tonumber(ARGV[%d]), tonumber(ARGV[%d])
  local r = %s(slice(KEYS, k, nk), slice(ARGV, a, na))
  if r == nil then r = false end
  out[%d] = r
  k, a = k + nk, a + na
`, 2*i+1, 2*i+2, fn[s.Script], i+1)
		if len(s.Proceed) > 0 && i < len(steps)-1 {
			b.WriteString("  local c = code(r)\n  if ")
			for j, p := range s.Proceed {
				if j > 0 {
					b.WriteString(" and ")
				}
				fmt.Fprintf(&b, "c ~= %s", luaString(p))
			}
			b.WriteString(" then return out end\n")
		}
		b.WriteString("end\n")
	}
	b.WriteString("return out\n")
	return b.String()
}

// luaString quotes s as a Lua string literal.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, c := range []byte(s) {
		switch {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// Op is a step with the reader of its reply, as its owner's own call would
// read it.
type Op struct {
	Step
	// Read reads the step's reply and returns the error the owner's call
	// returns for it (nil for success); it may keep what it read.
	Read func(reply any) error
}

// Run runs op's script alone, not in a batch, and returns what op.Read
// made of the reply, or the failure of the script itself wrapped as what.
func (op Op) Run(ctx context.Context, rdb redis.Scripter, what string) error {
	res, err := op.Script.Run(ctx, rdb, op.Keys, op.Args...).Result()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if op.Read == nil {
		return nil
	}
	return op.Read(res)
}

// ErrNotRun is the error of an op after the step that stopped its batch.
var ErrNotRun = errors.New("not run: an earlier step of the batch stopped it")

// Exec runs ops as one script (Run) and reads every reply: errs[i] is what
// ops[i].Read returned, or ErrNotRun. err is a failure of the script
// itself (connection, a redis.call error), with no reply read.
func Exec(ctx context.Context, rdb redis.Scripter, ops ...Op) (errs []error, err error) {
	steps := make([]Step, len(ops))
	for i, op := range ops {
		steps[i] = op.Step
	}
	res, err := Run(ctx, rdb, steps...)
	if err != nil {
		return nil, err
	}
	errs = make([]error, len(ops))
	for i, op := range ops {
		switch {
		case i >= len(res):
			errs[i] = ErrNotRun
		case op.Read != nil:
			errs[i] = op.Read(res[i])
		}
	}
	return errs, nil
}
