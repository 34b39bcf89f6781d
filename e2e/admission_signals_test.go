package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// signalPolicy: tenants a and b, and at most one g/waiter run of an item
// holding a worker slot at once.
const signalPolicy = `version: 1
tenants:
  a: {}
  b: {}
concurrency:
  - {name: per_item, directives: ["g/waiter"], key: "${inputs.item}", max: 1}
`

// sample is one series of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseExposition reads the samples of a /metrics body, each labelled
// with extra too (as Prometheus labels each target's series).
func parseExposition(t *testing.T, body string, extra map[string]string) []sample {
	t.Helper()
	var out []sample
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		require.NotNil(t, m, "exposition line %q", line)
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		for k, v := range extra {
			s.labels[k] = v
		}
		out = append(out, s)
	}
	return out
}

// kedaTerm is the one form of the terms of deploy/k8s/keda.yaml's query:
// (sum(max by (LABELS) (METRIC{spool_namespace="NS"})) or vector(0)).
var kedaTerm = regexp.MustCompile(`^\(sum\(max by \(([a-z_, ]+)\) \(([a-z_]+)\{spool_namespace="([^"]+)"\}\)\) or vector\(0\)\)$`)

// kedaQuery is the query of the KEDA trigger deploy/k8s/keda.yaml ships.
func kedaQuery(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../deploy/k8s/keda.yaml")
	require.NoError(t, err)
	var so struct {
		Spec struct {
			Triggers []struct {
				Type     string            `yaml:"type"`
				Metadata map[string]string `yaml:"metadata"`
			} `yaml:"triggers"`
		} `yaml:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &so))
	require.Len(t, so.Spec.Triggers, 1)
	require.Equal(t, "prometheus", so.Spec.Triggers[0].Type)
	return so.Spec.Triggers[0].Metadata["query"]
}

// evalKEDA evaluates query (the keda.yaml form: terms joined by +, each
// kedaTerm) over samples as Prometheus would, for namespace ns in place
// of the query's: each term's series grouped by its labels, the max of
// each group, summed, or 0 when there is none.
func evalKEDA(t *testing.T, query, ns string, samples []sample) float64 {
	t.Helper()
	total := 0.0
	terms := strings.Split(strings.Join(strings.Fields(query), " "), " + ")
	require.Len(t, terms, 2, "query %q", query)
	for _, term := range terms {
		m := kedaTerm.FindStringSubmatch(term)
		require.NotNil(t, m, "a term of another form than the test evaluates: %q", term)
		by := strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")
		require.Equal(t, "spool", m[3], "keda.yaml names the default namespace")
		groups := map[string]float64{}
		for _, s := range samples {
			if s.name != m[2] || s.labels["spool_namespace"] != ns {
				continue
			}
			var key []string
			for _, l := range by {
				key = append(key, s.labels[l])
			}
			k := strings.Join(key, "\x00")
			if v, ok := groups[k]; !ok || s.value > v {
				groups[k] = s.value
			}
		}
		for _, v := range groups {
			total += v
		}
	}
	return total
}

// gaugeSum sums the series of a gauge whose labels include match.
func gaugeSum(samples []sample, name string, match map[string]string) float64 {
	sum := 0.0
	for _, s := range samples {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && s.labels[k] == v
		}
		if ok {
			sum += s.value
		}
	}
	return sum
}

// admissionLines are the admission gauges of a /metrics body.
func admissionLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, g := range []string{"spool_admission_ready", "spool_admission_running", "spool_admission_blocked"} {
			if strings.HasPrefix(l, g+"{") {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// scrape reads the monitor's /metrics.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// TestAdmissionSignals (the autoscaling signal): through the binary on
// real Redis, with a policy published, one worker of two slots and
// `spool monitor` serving /metrics. A backlog blocked on a concurrency
// key leaves spool_admission_ready at 0 and shows in
// spool_admission_blocked{reason="concurrency"}; a backlog waiting for
// worker slots shows in spool_admission_ready; and the query of
// deploy/k8s/keda.yaml, evaluated on the scrapes of two monitor
// replicas as Prometheus would hold them, equals ready + running, then
// 0 once everything has run.
func TestAdmissionSignals(t *testing.T) {
	t.Parallel()
	files := graphProject()
	files[".ai/config/agent/admission.yaml"] = signalPolicy
	e := spooltest.New(t, spooltest.Options{Files: files, LeaseTTL: timedLease})
	r := e.Spool("admission", "apply")
	require.Equal(t, 0, r.Code, r.Stderr)
	e.StartWorker("--concurrency", "2")
	base, _ := startMonitor(t, e, nil)
	query := kedaQuery(t)
	gate, release := gateFile(t)
	ns := map[string]string{"spool_namespace": e.Namespace}
	// signals scrapes twice (two replicas of the monitor, told apart by
	// instance) and returns the first scrape's samples, with the KEDA
	// query evaluated on both.
	signals := func() ([]sample, float64) {
		t.Helper()
		body := scrape(t, base)
		t.Logf("scrape:\n%s", admissionLines(body))
		one := parseExposition(t, body, map[string]string{"instance": "monitor-1"})
		two := parseExposition(t, scrape(t, base), map[string]string{"instance": "monitor-2"})
		return one, evalKEDA(t, query, e.Namespace, append(one, two...))
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"spool_namespace": e.Namespace}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	// A key-blocked backlog: a's five runs of item x, one holding the
	// key, four waiting for it; a worker slot is free.
	var blocked []string
	for range 5 {
		blocked = append(blocked, startRun(t, e, "thread", "run", "g/waiter", "--input", "item=x", "--input", "gate="+gate, "--tenant", "a"))
	}
	waitRuns(t, e, blocked, "one x run holds the key, four wait for it", func(recs []*registry.Record) bool {
		return count(recs, func(r *registry.Record) bool { return r.Status == thread.StatusRunning }) == 1 &&
			count(recs, func(r *registry.Record) bool { return r.WaitingFor == "concurrency" }) == 4
	})
	s, keda := signals()
	require.Zero(t, gaugeSum(s, "spool_admission_ready", ns), "a key-blocked backlog is nothing more workers would serve")
	require.InDelta(t, 4, gaugeSum(s, "spool_admission_blocked", with("tenant", "a", "reason", "concurrency", "queue", "default")), 0)
	require.InDelta(t, 1, gaugeSum(s, "spool_admission_running", ns), 0)
	require.InDelta(t, 1, keda, 0, "the KEDA query: ready 0 + running 1")

	// A capacity backlog: b's five runs of other items, one in the free
	// slot, four ready for a slot.
	var ready []string
	for i := range 5 {
		ready = append(ready, startRun(t, e, "thread", "run", "g/waiter", "--input", fmt.Sprintf("item=y%d", i), "--input", "gate="+gate, "--tenant", "b"))
	}
	require.Eventually(t, func() bool {
		b := tenantShow(t, e, "b")
		return b.Running == 1 && b.Ready == 4
	}, time.Minute, 50*time.Millisecond, "b runs one and has four ready")
	s, keda = signals()
	require.InDelta(t, 4, gaugeSum(s, "spool_admission_ready", with("tenant", "b", "queue", "default")), 0)
	require.Zero(t, gaugeSum(s, "spool_admission_ready", with("tenant", "a")))
	require.InDelta(t, 4, gaugeSum(s, "spool_admission_blocked", with("reason", "concurrency")), 0)
	require.InDelta(t, 2, gaugeSum(s, "spool_admission_running", ns), 0)
	require.Zero(t, gaugeSum(s, "spool_admission_blocked", with("tenant", "b")), "b waits for slots only")
	require.InDelta(t, 2, gaugeSum(s, "spool_admission_capacity", ns), 0)
	require.InDelta(t, 6, keda, 0, "the KEDA query: ready 4 + running 2, blocked work left out, replicas counted once")

	// Everything runs: no demand left.
	release()
	for id, rec := range e.Wait(append(blocked, ready...), 2*time.Minute) {
		require.Equal(t, thread.StatusCompleted, rec.Status, id)
	}
	require.Eventually(t, func() bool {
		s, keda = signals()
		return keda == 0 && gaugeSum(s, "spool_admission_blocked", ns) == 0
	}, 30*time.Second, 100*time.Millisecond, "an idle fleet demands nothing")
}
