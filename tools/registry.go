package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/thread"
)

// ErrDuplicate is returned by Register when a tool's id, or one of its
// spellings, is already taken.
var ErrDuplicate = errors.New("tool already registered")

// ErrBadID is returned by Register for an item id that is not slash-separated
// segments of letters, digits, '_' and '-'.
var ErrBadID = errors.New("bad tool id")

// Registry maps item ids to tools. Lookup accepts three spellings of an id:
// the item id ("rye/file-system/fs_write"), the capability spelling with dots
// ("rye.file-system.fs_write") and the provider-safe WireName
// ("rye__file-system__fs_write"). It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]Tool   // item id -> tool
	names map[string]string // every spelling -> item id
}

// NewRegistry returns a registry holding tools, or the first Register error.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: map[string]Tool{}, names: map[string]string{}}
	for _, t := range tools {
		if err := r.Register(t); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ValidateID checks an item id: one or more segments of [A-Za-z0-9_-]
// separated by '/'. Dots are refused so that the dotted capability spelling
// maps back to exactly one id.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrBadID)
	}
	for _, seg := range strings.Split(id, "/") {
		if seg == "" {
			return fmt.Errorf("%w %q: empty segment", ErrBadID, id)
		}
		for _, c := range seg {
			if !idChar(c) {
				return fmt.Errorf("%w %q: character %q (want letters, digits, _ and - between slashes)", ErrBadID, id, c)
			}
		}
	}
	return nil
}

// idChar reports whether c may appear in an id's segment: an ASCII
// letter or digit, '_' or '-'.
func idChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// WireName is the tool name to send to a provider whose tool names must match
// ^[a-zA-Z0-9_-]{1,64}$ (Anthropic, OpenAI): '/' becomes "__"; a name longer
// than 64 bytes keeps its first 55 bytes and appends '_' and 8 hex digits of
// its SHA-256. Registry.Lookup maps it back.
func WireName(id string) string {
	w := strings.ReplaceAll(id, "/", "__")
	if len(w) <= 64 {
		return w
	}
	sum := sha256.Sum256([]byte(id))
	return w[:55] + "_" + hex.EncodeToString(sum[:4])
}

// Spellings are the names a tool of item id id is found by (Lookup): the
// id, its dotted form and its WireName.
func Spellings(id string) []string {
	return uniq(id, strings.ReplaceAll(id, "/", "."), WireName(id))
}

func uniq(ss ...string) []string {
	out := ss[:0]
	for i, s := range ss {
		dup := false
		for _, p := range ss[:i] {
			dup = dup || p == s
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// Register adds a tool. It fails with ErrBadID for an invalid id and with
// ErrDuplicate when the id or one of its spellings is taken.
func (r *Registry) Register(t Tool) error {
	id := t.Def().Name
	if err := ValidateID(id); err != nil {
		return fmt.Errorf("register tool: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	names := Spellings(id)
	for _, n := range names {
		if other, ok := r.names[n]; ok {
			return fmt.Errorf("register tool %q: %w (as %q by %q)", id, ErrDuplicate, n, other)
		}
	}
	r.tools[id] = t
	for _, n := range names {
		r.names[n] = id
	}
	return nil
}

// Lookup finds a tool by item id, dotted id, or WireName.
func (r *Registry) Lookup(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	id, ok := r.names[name]
	if !ok {
		return nil, false
	}
	return r.tools[id], true
}

// IDs returns every registered item id, sorted.
func (r *Registry) IDs() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.tools))
}

// Defs returns the definitions of the tools whose item id passes filter (all
// of them when filter is nil), sorted by id. Names are item ids; a provider
// adapter that needs safe names applies WireName.
func (r *Registry) Defs(filter func(itemID string) bool) []thread.ToolDef {
	var defs []thread.ToolDef
	for _, id := range r.IDs() {
		if filter != nil && !filter(id) {
			continue
		}
		r.mu.RLock()
		t := r.tools[id]
		r.mu.RUnlock()
		defs = append(defs, t.Def())
	}
	return defs
}

// Call runs one tool call and bounds its result: the call's name is looked up
// (an unknown name is an error result for the model, not a failure), the tool
// runs, and an output above maxBytes (GuardConfig default when <= 0) is
// stored at blobkey.ToolResult(env.ThreadID, call.ID) and cut (see Bound).
// Capability checks are the caller's: Call runs whatever it is given.
func (r *Registry) Call(ctx context.Context, env *Env, call thread.ToolCall, maxBytes int) (Result, error) {
	t, ok := r.Lookup(call.Name)
	if !ok {
		return errorResult(fmt.Sprintf("unknown tool %q", call.Name)), nil
	}
	res, err := t.Run(ctx, env, call.Input)
	if err != nil {
		return Result{}, fmt.Errorf("tool %s (call %s): %w", t.Def().Name, call.ID, err)
	}
	return Bound(ctx, env.Store, blobkey.ToolResult(env.ThreadID, call.ID), res, maxBytes)
}
