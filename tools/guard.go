package tools

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spool-run/spool/blobstore"
)

// DefaultMaxResultBytes is the size above which Bound cuts a result: 32 KiB.
const DefaultMaxResultBytes = 32 << 10

// MinMaxResultBytes is the smallest limit Bound honours; smaller limits are
// raised to it so that the view always has room for the note.
const MinMaxResultBytes = 512

// Bound returns r unchanged when its output fits in maxBytes
// (DefaultMaxResultBytes when <= 0, at least MinMaxResultBytes). Otherwise it
// stores the full output at key and returns a view of at most maxBytes: the
// first three quarters of the room, a note naming the artifact and the sizes,
// and the last quarter, cut on UTF-8 boundaries. IsError is kept and Artifact
// set to key. The only error is the store's.
func Bound(ctx context.Context, store blobstore.Store, key string, r Result, maxBytes int) (Result, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResultBytes
	}
	maxBytes = max(maxBytes, MinMaxResultBytes)
	total := len(r.Output)
	if total <= maxBytes {
		return r, nil
	}
	if store == nil {
		return Result{}, fmt.Errorf("bound result of %d bytes: no blob store for the artifact", total)
	}
	if err := store.Put(ctx, key, []byte(r.Output)); err != nil {
		return Result{}, fmt.Errorf("store artifact %s: %w", key, err)
	}
	// The note's length with every number as wide as the total bounds the
	// real note's length, so the view never exceeds maxBytes.
	room := max(maxBytes-len(boundNote(key, total, total, total)), 0)
	head := runeCutBefore(r.Output, room*3/4)
	tail := runeCutAfter(r.Output, total-(room-head))
	var b strings.Builder
	b.Grow(maxBytes)
	b.WriteString(r.Output[:head])
	b.WriteString(boundNote(key, total, head, total-tail))
	b.WriteString(r.Output[tail:])
	return Result{Output: b.String(), IsError: r.IsError, Artifact: key}, nil
}

func boundNote(key string, total, head, tail int) string {
	return "\n\n[spool: output cut: showing the first " + strconv.Itoa(head) +
		" and last " + strconv.Itoa(tail) + " of " + strconv.Itoa(total) +
		" bytes; the full output is artifact " + key +
		", readable in pages with rye/file-system/fs_read {\"artifact\": \"" + key + "\", \"offset\": 1, \"limit\": 200}]\n\n"
}

// runeCutBefore returns the largest i <= n such that s[:i] does not split a
// rune (backing off at most utf8.UTFMax-1 bytes, so invalid input still cuts).
func runeCutBefore(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for i := n; i >= 0 && i > n-utf8.UTFMax; i-- {
		if i == 0 || utf8.RuneStart(s[i]) {
			return i
		}
	}
	return n
}

// runeCutAfter returns the smallest i >= n such that s[i:] does not start
// inside a rune (moving at most utf8.UTFMax-1 bytes).
func runeCutAfter(s string, n int) int {
	if n <= 0 {
		return 0
	}
	for i := n; i <= len(s) && i < n+utf8.UTFMax; i++ {
		if i == len(s) || utf8.RuneStart(s[i]) {
			return i
		}
	}
	return min(n, len(s))
}
