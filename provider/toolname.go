package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// maxWireName is the longest tool name the APIs accept (Anthropic
// ^[a-zA-Z0-9_-]{1,64}$, OpenAI ^[a-zA-Z0-9_-]{1,64}$).
const maxWireName = 64

var simpleSegment = regexp.MustCompile(`^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$`)
var unsafeWire = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// WireName maps an item id to an API-safe tool name, deterministically:
//
//   - a "simple" id (segments separated by "/", each of [A-Za-z0-9-] with
//     single inner underscores) of at most 64 bytes once encoded becomes the
//     id with "/" replaced by "__" ("rye/file-system/fs_write" →
//     "rye__file-system__fs_write"); such names never hold three underscores
//     in a row, so decoding is unambiguous;
//   - any other id becomes a sanitised prefix, "___" and 12 hex digits of the
//     id's SHA-256, which no simple encoding can produce.
//
// Decoding goes through the per-request ToolNames table, so the model can
// only call back names it was given (or simple encodings of ids).
func WireName(id string) string {
	if isSimpleID(id) {
		if w := strings.ReplaceAll(id, "/", "__"); len(w) <= maxWireName {
			return w
		}
	}
	sum := sha256.Sum256([]byte(id))
	prefix := unsafeWire.ReplaceAllString(strings.ReplaceAll(id, "/", "__"), "_")
	prefix = strings.Trim(prefix, "_")
	const suffix = 3 + 12
	if len(prefix) > maxWireName-suffix {
		prefix = prefix[:maxWireName-suffix]
	}
	prefix = strings.TrimRight(prefix, "_")
	if prefix == "" {
		prefix = "tool"
	}
	return prefix + "___" + hex.EncodeToString(sum[:6])
}

func isSimpleID(id string) bool {
	if id == "" {
		return false
	}
	for _, seg := range strings.Split(id, "/") {
		if !simpleSegment.MatchString(seg) {
			return false
		}
	}
	return true
}

// ToolNames is one request's bijection between item ids and wire names.
type ToolNames struct {
	toWire map[string]string
	toID   map[string]string
}

// NewToolNames builds the table for the given item ids (tools offered and
// tools called earlier in the conversation). Two ids with the same wire name
// (a SHA-256 prefix collision) are an error.
func NewToolNames(ids ...string) (*ToolNames, error) {
	t := &ToolNames{toWire: map[string]string{}, toID: map[string]string{}}
	for _, id := range ids {
		if err := t.add(id); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *ToolNames) add(id string) error {
	if _, ok := t.toWire[id]; ok {
		return nil
	}
	w := WireName(id)
	if other, ok := t.toID[w]; ok && other != id {
		return fmt.Errorf("tool ids %q and %q map to the same wire name %q", other, id, w)
	}
	t.toWire[id], t.toID[w] = w, id
	return nil
}

// Wire is id's wire name.
func (t *ToolNames) Wire(id string) string {
	if w, ok := t.toWire[id]; ok {
		return w
	}
	return WireName(id)
}

// ID maps a wire name the model used back to an item id: through the table,
// else by decoding a simple encoding ("__" → "/"), else the name unchanged
// (an unknown tool, which the runner reports to the model).
func (t *ToolNames) ID(wire string) string {
	if id, ok := t.toID[wire]; ok {
		return id
	}
	if !strings.Contains(wire, "___") {
		if id := strings.ReplaceAll(wire, "__", "/"); isSimpleID(id) {
			return id
		}
	}
	return wire
}
