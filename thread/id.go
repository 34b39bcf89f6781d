package thread

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"hash/crc32"
	"strings"
	"sync/atomic"
	"time"
)

var idCounter atomic.Uint32

// idAlphabet is the alphabet of an id's random suffix (lower-case base32).
const idAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// TreeCodes is how many tree codes there are (TreeCode): 10 bits, two
// characters of an id's suffix.
const TreeCodes = 1024

// NewID returns a thread id of the spec's shape "{directive}-{epoch}" with a
// short random suffix: "test/hello-1739820456-k3j9qa". The directive and the
// second stay readable; the suffix (5 random bytes mixed with a process-wide
// counter) makes ids collision-free across goroutines and processes. Its
// first two characters are the id's tree code (TreeCode), random for a new
// tree; NewIDIn gives them another thread's.
func NewID(directive string, now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:5])
	b[5] = byte(idCounter.Add(1))
	suffix := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	return fmt.Sprintf("%s-%d-%s", directive, now.Unix(), suffix[:10])
}

// NewIDIn is NewID for a thread of the same tree as the thread tree: a
// child, a continuation, a fork. The new id carries tree's tree code, so
// a sharded key space (package keyspace) keeps a whole tree's keys in one
// Redis Cluster slot and its scripts (the budget walk up the ancestors,
// a parent's wait on its children) stay single-slot.
func NewIDIn(directive string, now time.Time, tree string) string {
	id := NewID(directive, now)
	if tree == "" {
		return id
	}
	c := TreeCode(tree)
	i := strings.LastIndexByte(id, '-') + 1
	return id[:i] + string(idAlphabet[c>>5]) + string(idAlphabet[c&31]) + id[i+2:]
}

// TreeCode is the tree code of id, in [0, TreeCodes): the first two
// characters of the suffix of an id made by NewID or NewIDIn, as a 10-bit
// number; for an id of another shape (named by a caller), a hash of the
// whole id. A thread made by NewIDIn(…, tree) has tree's code.
func TreeCode(id string) int {
	i := strings.LastIndexByte(id, '-') + 1
	if s := id[i:]; i > 0 && len(s) == 10 {
		hi, lo := strings.IndexByte(idAlphabet, s[0]), strings.IndexByte(idAlphabet, s[1])
		if hi >= 0 && lo >= 0 && strings.Trim(s, idAlphabet) == "" {
			return hi<<5 | lo
		}
	}
	return int(crc32.ChecksumIEEE([]byte(id)) % TreeCodes)
}

// DirectiveFromID returns the directive part of an id made by NewID, or "".
func DirectiveFromID(id string) string {
	parts := strings.Split(id, "-")
	if len(parts) < 3 {
		return ""
	}
	return strings.Join(parts[:len(parts)-2], "-")
}

// PlannedID is the id of a thread planned before it starts: a child whose
// start may be run again (a turn or a graph step re-run after a crash or a
// failover) must get the same id each time, so that the second start finds
// the first child and adopts it instead of starting a twin. It has
// NewID's shape "{directive}-{epoch}-{suffix}" and tree's tree code (as
// NewIDIn), but the epoch is the caller's durable time (its parent's
// registration: a first claim, and so a start time, is what a Redis
// failover can lose and a rerun makes again) and the rest of the suffix
// is a hash of tree and seed, which
// names the spawn within its parent: "turn/3/call/0", "step/7/item/2/attempt/1".
func PlannedID(directive string, at time.Time, tree, seed string) string {
	sum := sha256.Sum256([]byte(tree + "\x00" + seed + "\x00" + directive))
	suffix := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:6]))
	c := TreeCode(tree)
	return fmt.Sprintf("%s-%d-%c%c%s", directive, at.Unix(), idAlphabet[c>>5], idAlphabet[c&31], suffix[2:10])
}
