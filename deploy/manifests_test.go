package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const k8sDir = "k8s"

// loadTestBase loads the committed base; each call returns fresh objects
// that a test may mutate.
func loadTestBase(t *testing.T) *kbase {
	t.Helper()
	b, err := loadBase(k8sDir)
	require.NoError(t, err, "load %s", k8sDir)
	return b
}

func requireNoProblems(t *testing.T, probs []string) {
	t.Helper()
	for _, p := range probs {
		t.Error(p)
	}
}

// requireProblem fails unless one of probs mentions want.
func requireProblem(t *testing.T, probs []string, want string) {
	t.Helper()
	for _, p := range probs {
		if strings.Contains(p, want) {
			return
		}
	}
	t.Fatalf("no problem mentions %q; got %q", want, probs)
}

// mustReplace is src, the content of the committed file name, with its
// first old replaced by repl; it fails the test when the file no longer
// contains old.
func mustReplace(t *testing.T, name, src, old, repl string) string {
	t.Helper()
	require.Contains(t, src, old, "%s no longer contains %q; update the test", name, old)
	return strings.Replace(src, old, repl, 1)
}

// mustFind is find, failing the test when docs hold no such object.
func mustFind(t *testing.T, docs []doc, kind, name string) doc {
	t.Helper()
	d, ok := find(docs, kind, name)
	require.True(t, ok, "no %s %s", kind, name)
	return d
}

func TestEveryYAMLParses(t *testing.T) {
	t.Parallel()
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		docs, err := readDocs(path)
		if err != nil {
			t.Errorf("%v", err)
			return nil
		}
		require.NotEmpty(t, docs, "%s: no documents", path)
		n += len(docs)
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 9, "parsed only")
}

func TestParseDocsRejectsBadYAML(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src string }{
		{"syntax", "a: [1, 2\n"},
		{"tab indent", "a:\n\tb: 1\n"},
		{"scalar document", "---\njust a string\n"},
		{"second document broken", "a: 1\n---\nb: : :\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseDocs(tt.name, []byte(tt.src))
			require.Error(t, err, "parseDocs(%q) succeeded, want an error", tt.src)
		})
	}
	docs, err := parseDocs("multi", []byte("a: 1\n---\n---\nb: 2\n"))
	require.NoError(t, err, "multi-doc: got %d docs, err", len(docs))
	require.Len(t, docs, 2, "multi-doc: got %d docs, err %v; want 2 docs", len(docs), err)
}

func TestKustomization(t *testing.T) {
	t.Parallel()
	b := loadTestBase(t)
	requireNoProblems(t, checkKustomizationFiles(k8sDir, b.Kustomization))
	kinds := map[string]int{}
	for _, d := range b.Docs {
		kinds[d.kind()]++
	}
	for kind, want := range map[string]int{
		"Deployment": 3, "Service": 1, "ConfigMap": 1,
		"ScaledObject": 1, "TriggerAuthentication": 0, "PodDisruptionBudget": 1,
	} {
		if kinds[kind] != want {
			t.Errorf("%d %s documents, want %d", kinds[kind], kind, want)
		}
	}
	keys := b.Secrets["spool-secrets"]
	require.True(t, keys["signing.key"], "Secret spool-secrets keys %v, want signing.key and REDIS_PASSWORD among them", sortedKeys(keys))
	require.True(t, keys["REDIS_PASSWORD"], "Secret spool-secrets keys %v, want signing.key and REDIS_PASSWORD among them", sortedKeys(keys))
}

func TestWorkloads(t *testing.T) {
	t.Parallel()
	requireNoProblems(t, checkWorkloads(loadTestBase(t)))
}

func TestWorkerGracePeriodOutlastsShutdownTimeout(t *testing.T) {
	t.Parallel()
	requireNoProblems(t, checkGracePeriod(loadTestBase(t).Docs))
}

func TestKEDAScalesOnAdmissionDemand(t *testing.T) {
	t.Parallel()
	b := loadTestBase(t)
	requireNoProblems(t, checkKEDA(b))

	// Spell the query out once more, independently of the checker: ready
	// plus running, blocked left out, in the default namespace, a pod per
	// 8 slots (the worker's --concurrency).
	so, _ := find(b.Docs, "ScaledObject", "spool-worker")
	trig := list(so.Obj, "spec", "triggers")
	require.Len(t, trig, 1)
	require.Equal(t, "prometheus", str(trig[0], "type"))
	require.Equal(t, `(sum(max by (tenant, queue) (spool_admission_ready{spool_namespace="spool"})) or vector(0)) `+
		`+ (sum(max by (tenant, queue) (spool_admission_running{spool_namespace="spool"})) or vector(0))`,
		strings.Join(strings.Fields(str(trig[0], "metadata", "query")), " "))
	require.Equal(t, "8", str(trig[0], "metadata", "threshold"))
	require.NotContains(t, str(trig[0], "metadata", "query"), "blocked", "blocked work is no demand: more workers would not help it")
}

func TestSchedulerRunsTwoReplicas(t *testing.T) {
	t.Parallel()
	b := loadTestBase(t)
	d := mustFind(t, b.Docs, "Deployment", "spool-scheduler")
	n, _ := intOf(d.Obj, "spec", "replicas")
	require.Equal(t, 2, n, "scheduler replicas")
	args := stringsOf(list(d.Obj, containerPath("args")...))
	require.NotEmpty(t, args, "scheduler args")
	require.Equal(t, "scheduler", args[0], "scheduler args = %v", args)
}

func TestMonitorServiceSelectsMonitor(t *testing.T) {
	t.Parallel()
	b := loadTestBase(t)
	svc := mustFind(t, b.Docs, "Service", "spool-monitor")
	typ := str(svc.Obj, "spec", "type")
	require.Equal(t, "ClusterIP", typ, "monitor Service type")
	d, _ := find(b.Docs, "Deployment", "spool-monitor")
	labels := mapping(d.Obj, "spec", "template", "metadata", "labels")
	for k, v := range mapping(svc.Obj, "spec", "selector") {
		if labels[k] != v {
			t.Errorf("Service selector %s=%v does not match the monitor pods", k, v)
		}
	}
	c := get(d.Obj, containerPath()...)
	target := str(svc.Obj, "spec", "ports", 0, "targetPort")
	found := false
	for _, p := range list(c, "ports") {
		found = found || str(p, "name") == target || str(p, "containerPort") == target
	}
	require.True(t, found, "Service targetPort %q is not a port of the monitor container", target)
	addr, _ := flagValue(stringsOf(list(c, "args")), "addr")
	require.True(t, strings.HasSuffix(addr, ":8080"), "monitor --addr %q does not listen on the container port 8080", addr)
}

func TestCheckImage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		image string
		ok    bool
	}{
		{"ghcr.io/spool-run/spool:0.1.0", true},
		{"ghcr.io/spool-run/spool@sha256:0123abcd", true},
		{"ghcr.io/spool-run/spool", false},
		{"ghcr.io/spool-run/spool:latest", false},
		{"redis:7.4.2", true},
		{"redis:latest", false},
		{"redis", false},
		{"docker.io/library/busybox:1.36", false},
		{"", false},
	}
	for _, tt := range tests {
		if err := checkImage(tt.image); (err == nil) != tt.ok {
			t.Errorf("checkImage(%q) = %v, want ok=%v", tt.image, err, tt.ok)
		}
	}
}

func TestParseQueues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"critical=6,default=3,low=1", []string{"critical", "default", "low"}},
		{"default=1", []string{"default"}},
		{"a=1,a=2", nil},
		{"a", nil},
		{"a=0", nil},
		{"=3", nil},
		{"a=x", nil},
		{"", nil},
	}
	for _, tt := range tests {
		got, err := parseQueues(tt.in)
		if tt.want == nil {
			if err == nil {
				t.Errorf("parseQueues(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseQueues(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseQueues: whatever it accepts are distinct, non-empty names that
// appear in the input in order.
func FuzzParseQueues(f *testing.F) {
	f.Add("critical=6,default=3,low=1")
	f.Add("a=1,,b=2")
	f.Fuzz(func(t *testing.T, in string) {
		names, err := parseQueues(in)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		rest := in
		for _, n := range names {
			if n == "" || seen[n] {
				t.Fatalf("parseQueues(%q) = %q: empty or repeated name", in, names)
			}
			seen[n] = true
			i := strings.Index(rest, n+"=")
			if i < 0 {
				t.Fatalf("parseQueues(%q) = %q: %q not in order", in, names, n)
			}
			rest = rest[i+len(n):]
		}
	})
}

func TestReadmeDocumentsTheTrigger(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("README.md")
	require.NoError(t, err)
	readme := string(data)
	for _, want := range []string{
		"spool_admission_ready", "spool_admission_running", "spool_admission_blocked", "threshold",
		"kubectl apply", "-k deploy/k8s", "Running a fleet", "fleet.sh",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("deploy/README.md does not mention %q", want)
		}
	}
}
