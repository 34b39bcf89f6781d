package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
)

// rss is the resident memory of process pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// heapHeld is the memory the Go heap of a process holds from the system
// (heap_sys - heap_released), read from its /metrics at base: what the
// process gives back when it returns freed memory, whatever else (a race
// detector's shadow) its RSS holds.
func heapHeld(t *testing.T, base string) int64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	vals := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			vals[name] = f
		}
	}
	sys, okS := vals["go_memstats_heap_sys_bytes"]
	rel, okR := vals["go_memstats_heap_released_bytes"]
	require.True(t, okS && okR, "no heap metrics")
	return int64(sys - rel)
}

// openStreams opens n event streams of thread id on base from local
// address from (a loopback address: each is a client of its own), and
// returns how many were accepted (200) and refused (429); the accepted
// ones stay open until ctx ends.
func openStreams(t *testing.T, ctx context.Context, base, id, from string, n int) (accepted, refused int) {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
		MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	var ok, no atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		started := make(chan struct{})
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/threads/"+url.PathEscape(id)+"/events", nil)
			resp, err := hc.Do(req)
			if err != nil {
				close(started)
				return
			}
			defer resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				// Read until the stream's first message has come.
				if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err == nil {
					ok.Add(1)
				}
				close(started)
				<-ctx.Done()
			case http.StatusTooManyRequests:
				no.Add(1)
				close(started)
			default:
				close(started)
			}
		}()
		<-started
	}
	go func() { wg.Wait() }()
	return int(ok.Load()), int(no.Load())
}

// TestEventStreamsBounded: `spool api` holds at most --max-streams event
// streams at once, and --max-streams-per-client of one client; the next
// is refused with 429 (too_many_streams) while the others stay open, a
// client of its own still gets one, and once the streams close their
// memory is given back.
func TestEventStreamsBounded(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: peopleProject()})
	e.StartWorker("--concurrency", "2")
	id := startThread(t, e, "p/write", "--model", "script:scripts/p.yaml")
	waitForApproval(t, e, id) // it waits: its stream stays open

	const total, perClient = 120, 80
	port, err := testenv.FreePort()
	require.NoError(t, err)
	metrics := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv := startAPI(t, e, "--max-streams", strconv.Itoa(total), "--max-streams-per-client", strconv.Itoa(perClient),
		"--metrics-addr", strings.TrimPrefix(metrics, "http://"))
	pid := srv.proc.Cmd.Process.Pid
	before, rssBefore := heapHeld(t, metrics), rss(t, pid)

	ctx, cancel := context.WithCancel(context.Background())
	ok1, no1 := openStreams(t, ctx, srv.base, id, "127.0.0.1", perClient+20)
	require.Equal(t, perClient, ok1, "one client's streams up to its cap")
	require.Equal(t, 20, no1, "then 429")
	ok2, no2 := openStreams(t, ctx, srv.base, id, "127.0.0.2", perClient)
	require.Equal(t, total-perClient, ok2, "another client's, up to the server's cap")
	require.Equal(t, perClient-(total-perClient), no2)
	peak, rssPeak := heapHeld(t, metrics), rss(t, pid)

	cancel()
	var after int64
	require.Eventually(t, func() bool {
		after = heapHeld(t, metrics)
		return after < before+(peak-before)/4
	}, time.Minute, 500*time.Millisecond, "the streams' memory is not given back")
	t.Logf("heap held: %d MB before, %d MB with %d streams open, %d MB once closed; RSS %d, %d, %d MB",
		before>>20, peak>>20, total, after>>20, rssBefore>>20, rssPeak>>20, rss(t, pid)>>20)

	// Once closed, a client may open streams again.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ok3, _ := openStreams(t, ctx2, srv.base, id, "127.0.0.1", 5)
	require.Equal(t, 5, ok3)
}
