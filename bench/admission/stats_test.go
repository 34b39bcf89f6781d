package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestPercentileAndMedian(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(1..100 ms, %g) = %s, want %s", c.p, got, c.want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentile sorted its argument in place")
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(none) = %s", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3, 1, 2) = %g", got)
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{1, 1, 1, 1}, 1}, {[]float64{1, 0, 0, 0}, 0.25}, {[]float64{3, 1}, 0.8}, {nil, 1}} {
		if got := jain(c.xs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("jain(%v) = %g, want %g", c.xs, got, c.want)
		}
	}
}

// TestJainWindows: tenant a (weight 3) runs three slots and b one, both
// backlogged until a's last start at 10 s, then b alone: two whole
// windows of 5 s, each a fair split by weight; what follows is left out.
func TestJainWindows(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var spans []span
	add := func(tenant string, slots int, from, to time.Duration) {
		for range slots {
			for at := from; at < to; at += time.Second {
				spans = append(spans, span{Tenant: tenant, Created: t0, Started: t0.Add(at), Ended: t0.Add(at + time.Second)})
			}
		}
	}
	add("a", 3, 0, 11*time.Second)
	add("b", 1, 0, 20*time.Second)
	got := jainWindows(spans, map[string]float64{"a": 3, "b": 1}, 5*time.Second)
	if len(got.Index) != 2 {
		t.Fatalf("windows = %d (%v), want 2: a's last start at 10 s ends the backlogged time", len(got.Index), got.Index)
	}
	for i, j := range got.Index {
		if math.Abs(j-1) > 1e-9 {
			t.Errorf("window %d: Jain %g, want 1 (slot-seconds in proportion to weight)", i, j)
		}
	}
	if a, b := got.SlotSeconds["a"], got.SlotSeconds["b"]; a != 30 || b != 10 {
		t.Errorf("slot-seconds a %g b %g, want 30 and 10", a, b)
	}
	// Equal weights on the same spans: unfair, 0.8 in each window.
	got = jainWindows(spans, map[string]float64{"a": 1, "b": 1}, 5*time.Second)
	for i, j := range got.Index {
		if math.Abs(j-0.8) > 1e-9 {
			t.Errorf("equal weights, window %d: Jain %g, want 0.8", i, j)
		}
	}
}

func TestTableAndFormats(t *testing.T) {
	tb := newTable("arm", ">threads/s")
	tb.add("off", thousands(12345.6))
	tb.add("on+keys", thousands(987))
	var b bytes.Buffer
	tb.write(&b)
	want := "| arm     | threads/s |\n| ------- | --------: |\n| off     |    12,346 |\n| on+keys |       987 |\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	for x, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(x); got != want {
			t.Errorf("thousands(%g) = %q, want %q", x, got, want)
		}
	}
	if got := ms(1500 * time.Microsecond); got != "1.5" {
		t.Errorf("ms(1.5ms) = %q", got)
	}
	if got := ms(1234 * time.Millisecond); got != "1234" {
		t.Errorf("ms(1.234s) = %q", got)
	}
}

func TestPolicies(t *testing.T) {
	for name, p := range onPolicies {
		if _, err := parsePolicy(p(16)); err != nil {
			t.Errorf("policy %s: %v", name, err)
		}
	}
	if _, err := parsePolicy(tenantsPolicy(map[string]float64{"a": 3, "b": 1})); err != nil {
		t.Error(err)
	}
}

// TestTinyRun runs the whole harness at a tiny scale on a redis-server
// of its own: every arm, both workloads, the fairness and priority rows.
func TestTinyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server and a worker")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	o := options{threads: 24, multi: 8, rounds: 1, conc: 4, producers: 2, topology: "standalone", policy: "full",
		throughput: true, fairness: true, fairConc: 4, backlog: 16, newcomers: 4, prioBacklog: 12,
		activation: 40 * time.Millisecond, prioActivation: 100 * time.Millisecond, jainFor: 200 * time.Millisecond}
	out := captureStdout(t, func() {
		if err := run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	})
	for _, want := range []string{"| standalone | single-turn | on+keys |", "| standalone | three-turn  | off     |", "newcomer on:", "| 3:1 ", "| on        |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// captureStdout is what fn prints to os.Stdout.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = saved }()
	func() {
		defer func() { _ = w.Close() }()
		fn()
	}()
	os.Stdout = saved
	return <-done
}
