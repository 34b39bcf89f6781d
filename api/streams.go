package api

import (
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// streamGate bounds the event streams a server holds open: at most max
// in all and perClient of one client (its basic auth user, else its
// address), so that no caller, careless or hostile, holds the server's
// memory and Redis connections (each stream subscribes to its thread's
// live events). Once the streams close, their memory goes back to the
// system (release), instead of staying with the process until the
// runtime's next collection minutes later.
type streamGate struct {
	max, perClient int
	// releaseAfter is how long the gate waits, once streams have closed,
	// before it returns their memory (one release for a burst of closes).
	releaseAfter time.Duration
	// release returns the memory (debug.FreeOSMemory; tests count it).
	release func()

	mu       sync.Mutex
	open     int
	byClient map[string]int
	// peak is the most streams open since the last release.
	peak      int
	scheduled bool
}

func newStreamGate(most, perClient int) *streamGate {
	return &streamGate{max: most, perClient: perClient, releaseAfter: 2 * time.Second, release: debug.FreeOSMemory,
		byClient: map[string]int{}}
}

// streamRetryAfter is the Retry-After of a refused stream, in seconds.
const streamRetryAfter = "5"

// acquire admits a stream of client, or says which bound refuses it
// ("" when admitted). done ends an admitted stream.
func (g *streamGate) acquire(client string) (done func(), refusal string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.open >= g.max:
		return nil, "the server holds the most event streams it may (--max-streams)"
	case g.byClient[client] >= g.perClient:
		return nil, "this client holds the most event streams one client may (--max-streams-per-client)"
	}
	g.open++
	g.peak = max(g.peak, g.open)
	g.byClient[client]++
	var once sync.Once
	return func() { once.Do(func() { g.end(client) }) }, ""
}

// end ends a stream of client. A moment after streams close, when at
// most half of the most that were open since the last release still
// are, their memory is returned (a steady churn of streams returns
// nothing: it would only make the collector run more).
func (g *streamGate) end(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
	if g.byClient[client]--; g.byClient[client] <= 0 {
		delete(g.byClient, client)
	}
	if g.scheduled {
		return
	}
	g.scheduled = true
	time.AfterFunc(g.releaseAfter, func() {
		g.mu.Lock()
		g.scheduled = false
		worth := g.open*2 <= g.peak
		if worth {
			g.peak = g.open
		}
		g.mu.Unlock()
		if worth {
			g.release()
		}
	})
}

// streamClient is who a stream counts against: the basic auth user,
// else the address the request came from.
func streamClient(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return "user:" + u
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}
