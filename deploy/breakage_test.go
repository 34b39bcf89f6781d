package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each case breaks the committed base in one way and names the complaint
// the checkers must raise; a checker that stops looking fails here.
func TestChecksCatchBrokenManifests(t *testing.T) {
	t.Parallel()
	worker := func(b *kbase) obj { d, _ := find(b.Docs, "Deployment", "spool-worker"); return d.Obj }
	so := func(b *kbase) obj { d, _ := find(b.Docs, "ScaledObject", "spool-worker"); return d.Obj }
	cm := func(b *kbase) obj { d, _ := find(b.Docs, "ConfigMap", "spool-config"); return d.Obj }
	monitor := func(b *kbase) obj { d, _ := find(b.Docs, "Deployment", "spool-monitor"); return d.Obj }
	setArgs := func(t *testing.T, b *kbase, args ...any) { set(t, worker(b), args, containerPath("args")...) }

	tests := []struct {
		name   string
		mutate func(t *testing.T, b *kbase)
		check  func(b *kbase) []string
		want   string
	}{
		{"grace period equal to shutdown timeout",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), 30, "spec", "template", "spec", "terminationGracePeriodSeconds")
			}, func(b *kbase) []string { return checkGracePeriod(b.Docs) }, "not longer than --shutdown-timeout 30s"},
		{"shutdown timeout raised past grace period",
			func(t *testing.T, b *kbase) {
				setArgs(t, b, "worker", "--concurrency=8", "--queues=critical=6,default=3,low=1", "--shutdown-timeout=2m")
			}, func(b *kbase) []string { return checkGracePeriod(b.Docs) }, "not longer than --shutdown-timeout 2m0s"},
		{"grace period missing uses the 30s default",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), nil, "spec", "template", "spec", "terminationGracePeriodSeconds")
			}, func(b *kbase) []string { return checkGracePeriod(b.Docs) }, "terminationGracePeriodSeconds 30"},
		{"a redis list trigger back",
			func(t *testing.T, b *kbase) {
				set(t, so(b), []any{obj{"type": "redis", "name": "default-pending", "metadata": obj{"listName": "asynq:{default}:pending", "listLength": "8"}}},
					"spec", "triggers")
			}, checkKEDA, `type "redis" reads asynq's lists`},
		{"a second trigger",
			func(t *testing.T, b *kbase) {
				trig := list(so(b), "spec", "triggers")
				set(t, so(b), append(trig, trig[0]), "spec", "triggers")
			}, checkKEDA, "want exactly one trigger"},
		{"query without running",
			func(t *testing.T, b *kbase) {
				set(t, so(b), `sum(max by (tenant, queue) (spool_admission_ready{spool_namespace="spool"})) or vector(0)`, "spec", "triggers", 0, "metadata", "query")
			}, checkKEDA, "is not admission's demand"},
		{"query counting blocked work",
			func(t *testing.T, b *kbase) {
				set(t, so(b), `sum(spool_admission_ready{spool_namespace="spool"}) + sum(spool_admission_blocked{spool_namespace="spool"})`, "spec", "triggers", 0, "metadata", "query")
			}, checkKEDA, "is not admission's demand"},
		{"threshold off the concurrency",
			func(t *testing.T, b *kbase) { set(t, so(b), "16", "spec", "triggers", 0, "metadata", "threshold") },
			checkKEDA, "threshold 16 is not the worker's --concurrency 8"},
		{"concurrency raised without the threshold",
			func(t *testing.T, b *kbase) {
				setArgs(t, b, "worker", "--concurrency=16", "--queues=critical=6,default=3,low=1", "--shutdown-timeout=30s")
			}, checkKEDA, "threshold 8 is not the worker's --concurrency 16"},
		{"null answers read as zero",
			func(t *testing.T, b *kbase) {
				set(t, so(b), "true", "spec", "triggers", 0, "metadata", "ignoreNullValues")
			},
			checkKEDA, `ignoreNullValues "true"`},
		{"server address not a URL",
			func(t *testing.T, b *kbase) {
				set(t, so(b), "prometheus:9090", "spec", "triggers", 0, "metadata", "serverAddress")
			},
			checkKEDA, `serverAddress "prometheus:9090"`},
		{"worker sets replicas",
			func(t *testing.T, b *kbase) { set(t, worker(b), 3, "spec", "replicas") },
			checkKEDA, "KEDA owns the worker replica count"},
		{"min above max",
			func(t *testing.T, b *kbase) { set(t, so(b), 50, "spec", "minReplicaCount") },
			checkKEDA, "minReplicaCount <= maxReplicaCount"},
		{"scale to zero",
			func(t *testing.T, b *kbase) { set(t, so(b), 0, "spec", "minReplicaCount") },
			checkKEDA, "minReplicaCount 0: at least one worker must run"},
		{"namespace in the ConfigMap, query of the default namespace",
			func(t *testing.T, b *kbase) { set(t, cm(b), "tenant-a", "data", "SPOOL_NAMESPACE") },
			checkKEDA, `is not admission's demand in namespace "tenant-a"`},
		{"namespace in the worker's env",
			func(t *testing.T, b *kbase) { setEnv(t, worker(b), "SPOOL_NAMESPACE", "tenant-b") },
			checkKEDA, `is not admission's demand in namespace "tenant-b"`},
		{"namespace from a Secret",
			func(t *testing.T, b *kbase) {
				env := append(list(worker(b), containerPath("env")...), obj{"name": "SPOOL_NAMESPACE",
					"valueFrom": obj{"secretKeyRef": obj{"name": "spool-secrets", "key": "REDIS_PASSWORD"}}})
				set(t, worker(b), env, containerPath("env")...)
			}, checkKEDA, "SPOOL_NAMESPACE comes from a Secret"},
		{"ScaledObject targets another Deployment",
			func(t *testing.T, b *kbase) { set(t, so(b), "spool-web", "spec", "scaleTargetRef", "name") },
			checkKEDA, "want exactly one ScaledObject targeting spool-worker, found 0"},
		{"secret key missing",
			func(t *testing.T, b *kbase) { delete(b.Secrets["spool-secrets"], "AWS_SECRET_ACCESS_KEY") },
			checkWorkloads, `Secret "spool-secrets" has no key "AWS_SECRET_ACCESS_KEY"`},
		{"configmap missing",
			func(t *testing.T, b *kbase) { set(t, cm(b), "spool-settings", "metadata", "name") },
			checkWorkloads, `envFrom ConfigMap "spool-config" does not exist`},
		{"setting dropped from the ConfigMap",
			func(t *testing.T, b *kbase) { set(t, cm(b), nil, "data", "SPOOL_S3_BUCKET") },
			checkWorkloads, "setting SPOOL_S3_BUCKET is not provided"},
		{"url refers to an undefined variable",
			func(t *testing.T, b *kbase) { set(t, cm(b), nil, "data", "SPOOL_REDIS_DB") },
			checkWorkloads, "refers to $(SPOOL_REDIS_DB)"},
		{"signing key path moved off the mount",
			func(t *testing.T, b *kbase) { setEnv(t, worker(b), "SPOOL_SIGNING_KEY", "/keys/signing.key") },
			checkWorkloads, "SPOOL_SIGNING_KEY /keys/signing.key is not a file of a mounted Secret"},
		{"signer without a signing key",
			func(t *testing.T, b *kbase) { setEnv(t, worker(b), "SPOOL_SIGNING_KEY", "") },
			checkWorkloads, "setting SPOOL_SIGNING_KEY is not provided"},
		{"signing key back in the shared ConfigMap",
			func(t *testing.T, b *kbase) {
				set(t, cm(b), "/etc/spool/keys/signing.key", "data", "SPOOL_SIGNING_KEY")
			},
			checkWorkloads, "a reader (monitor) is given SPOOL_SIGNING_KEY"},
		{"monitor mounts the private key",
			func(t *testing.T, b *kbase) {
				set(t, monitor(b), "signing.key", "spec", "template", "spec", "volumes", 0, "secret", "items", 0, "key")
			}, checkWorkloads, "a reader (monitor) mounts the private signing key"},
		{"monitor mounts the whole Secret",
			func(t *testing.T, b *kbase) {
				set(t, monitor(b), nil, "spec", "template", "spec", "volumes", 0, "secret", "items")
			}, checkWorkloads, "a reader (monitor) mounts the private signing key"},
		{"monitor without trusted keys",
			func(t *testing.T, b *kbase) { setEnv(t, monitor(b), "SPOOL_TRUSTED_KEYS", "") },
			checkWorkloads, "a reader (monitor) has no SPOOL_TRUSTED_KEYS"},
		{"trusted keys off the mount",
			func(t *testing.T, b *kbase) { setEnv(t, monitor(b), "SPOOL_TRUSTED_KEYS", "/etc/spool/keys") },
			checkWorkloads, "SPOOL_TRUSTED_KEYS /etc/spool/keys is not a mounted Secret or ConfigMap volume"},
		{"unpinned image",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), "ghcr.io/spool-run/spool:latest", containerPath("image")...)
			},
			checkWorkloads, "not latest"},
		{"foreign image",
			func(t *testing.T, b *kbase) { set(t, worker(b), "busybox:1.36", containerPath("image")...) },
			checkWorkloads, "neither ghcr.io/spool-run/spool nor a known pinned image"},
		{"root user",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), 0, "spec", "template", "spec", "securityContext", "runAsUser")
			},
			checkWorkloads, "runAsUser must be a non-zero uid"},
		{"privilege escalation allowed",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), true, containerPath("securityContext", "allowPrivilegeEscalation")...)
			}, checkWorkloads, "allowPrivilegeEscalation is not false"},
		{"probe on the wrong path",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), "/", containerPath("livenessProbe", "httpGet", "path")...)
			},
			checkWorkloads, `livenessProbe.httpGet.path is "/"`},
		{"probe on an undeclared port",
			func(t *testing.T, b *kbase) {
				set(t, worker(b), "http", containerPath("readinessProbe", "httpGet", "port")...)
			},
			checkWorkloads, `readinessProbe port "http" is not a declared container port`},
		{"no memory limit",
			func(t *testing.T, b *kbase) { set(t, worker(b), nil, containerPath("resources", "limits")...) },
			checkWorkloads, "resources.limits.memory is not set"},
		{"namespace hard-coded",
			func(t *testing.T, b *kbase) { set(t, cm(b), "spool", "metadata", "namespace") },
			checkWorkloads, "must be namespace-agnostic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := loadTestBase(t)
			probs := tt.check(b)
			require.Empty(t, probs, "committed base already has problems")
			tt.mutate(t, b)
			requireProblem(t, tt.check(b), tt.want)
		})
	}
}

func TestKustomizationCheckCatchesBrokenFileLists(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(t *testing.T, dir string, k obj)
		want   string
	}{
		{"missing resource", func(t *testing.T, dir string, k obj) {
			k["resources"] = append(list(k, "resources"), "hpa.yaml")
		}, `resource "hpa.yaml" does not exist`},
		{"unlisted manifest", func(t *testing.T, dir string, k obj) {
			k["resources"] = list(k, "resources")[1:]
		}, "configmap.yaml is not listed in resources"},
		{"namespace set", func(t *testing.T, dir string, k obj) { k["namespace"] = "spool" }, "namespace-agnostic"},
		{"generator source without template", func(t *testing.T, dir string, k obj) {
			set(t, k, []any{"secrets/other.env"}, "secretGenerator", 0, "envs")
		}, "secrets/other.env.example exists"},
		{"secret not git-ignored", func(t *testing.T, dir string, k obj) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "secrets", ".gitignore"), []byte("signing.key\n"), 0o644))
		}, "secrets/credentials.env is not git-ignored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := copyTree(t, k8sDir)
			b, err := loadBase(dir)
			require.NoError(t, err)
			tt.mutate(t, dir, b.Kustomization)
			requireProblem(t, checkKustomizationFiles(dir, b.Kustomization), tt.want)
		})
	}
}

// setEnv sets (value != "") or removes the env variable name of the
// first container of workload d.
func setEnv(t *testing.T, d obj, name, value string) {
	t.Helper()
	envPath := containerPath("env")
	var env []any
	found := false
	for _, e := range list(d, envPath...) {
		if str(e, "name") != name {
			env = append(env, e)
			continue
		}
		found = true
		if value != "" {
			env = append(env, obj{"name": name, "value": value})
		}
	}
	if !found && value != "" {
		env = append(env, obj{"name": name, "value": value})
	}
	set(t, d, env, envPath...)
}

// copyTree copies dir into a fresh temporary directory and returns the copy.
func copyTree(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(dir)))
	return dst
}

// TestKEDAQueryFollowsTheNamespace: outside the default namespace the
// monitor labels admission's metrics spool_namespace="<namespace>", so the
// query must name it; with it renamed the base passes again. The
// namespace comes from the ConfigMap or the worker's own env, which wins.
func TestKEDAQueryFollowsTheNamespace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, cmNS, envNS, want string
	}{
		{"default namespace spelled out", "spool", "", "spool"},
		{"ConfigMap", "tenant-a", "", "tenant-a"},
		{"worker env wins over the ConfigMap", "tenant-a", "tenant-b", "tenant-b"},
		{"braces are dropped like keyspace.New does", "{tenant-c}", "", "tenant-c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := loadTestBase(t)
			cm, _ := find(b.Docs, "ConfigMap", "spool-config")
			set(t, cm.Obj, tt.cmNS, "data", "SPOOL_NAMESPACE")
			if tt.envNS != "" {
				w, _ := find(b.Docs, "Deployment", "spool-worker")
				setEnv(t, w.Obj, "SPOOL_NAMESPACE", tt.envNS)
			}
			so, _ := find(b.Docs, "ScaledObject", "spool-worker")
			trig := list(so.Obj, "spec", "triggers")[0]
			q := str(trig, "metadata", "query")
			if tt.want != "spool" {
				require.NotEmpty(t, checkKEDA(b), "a query of namespace spool passes in namespace %q", tt.want)
			}
			renamed := strings.ReplaceAll(q, `spool_namespace="spool"`, `spool_namespace="`+tt.want+`"`)
			require.Equal(t, 2, strings.Count(renamed, tt.want+`"`), "both halves of the query name the namespace")
			set(t, trig, renamed, "metadata", "query")
			requireNoProblems(t, checkKEDA(b))
		})
	}
}
