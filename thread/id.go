package thread

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

var idCounter atomic.Uint32

// NewID returns a thread id of the spec's shape "{directive}-{epoch}" with a
// short random suffix: "test/hello-1739820456-k3j9qa". The directive and the
// second stay readable; the suffix (5 random bytes mixed with a process-wide
// counter) makes ids collision-free across goroutines and processes.
func NewID(directive string, now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:5])
	b[5] = byte(idCounter.Add(1))
	suffix := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	return fmt.Sprintf("%s-%d-%s", directive, now.Unix(), suffix[:10])
}

// DirectiveFromID returns the directive part of an id made by NewID, or "".
func DirectiveFromID(id string) string {
	parts := strings.Split(id, "-")
	if len(parts) < 3 {
		return ""
	}
	return strings.Join(parts[:len(parts)-2], "-")
}
