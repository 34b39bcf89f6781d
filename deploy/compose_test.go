package deploy

import (
	"slices"
	"strings"
	"testing"
)

func loadTestCompose(t *testing.T) obj {
	t.Helper()
	c, err := loadCompose("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompose(t *testing.T) {
	t.Parallel()
	c := loadTestCompose(t)
	requireNoProblems(t, checkCompose(c))
	services := mapping(c, "services")
	for _, want := range []string{"redis", "s3", "worker", "scheduler", "monitor"} {
		if services[want] == nil {
			t.Errorf("compose has no %s service", want)
		}
	}
	if r, _ := intOf(services, "scheduler", "deploy", "replicas"); r > 1 {
		t.Errorf("compose runs %d schedulers, want one", r)
	}
}

func TestComposeAndKubernetesWorkersServeTheSameQueues(t *testing.T) {
	t.Parallel()
	c := loadTestCompose(t)
	cq, err := queuesOf(composeArgs(mapping(c, "services", "worker")))
	if err != nil {
		t.Fatal(err)
	}
	_, wc, err := workerContainer(loadTestBase(t).Docs)
	if err != nil {
		t.Fatal(err)
	}
	kq, err := queuesOf(stringsOf(list(wc, "args")))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cq, kq) {
		t.Fatalf("compose worker queues %v != Kubernetes worker queues %v", cq, kq)
	}
}

func TestInterpolate(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"${A:-3}", "3"},
		{"${A-x y}", "x y"},
		{"${A}", ""},
		{"$${B}", "${B}"},
		{"--c=${N:-8} $$HOME", "--c=8 $HOME"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := interpolate(tt.in); got != tt.want {
			t.Errorf("interpolate(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestComposeChecksCatchBreakage(t *testing.T) {
	t.Parallel()
	svc := func(c obj, name string) obj { return mapping(c, "services", name) }
	tests := []struct {
		name   string
		mutate func(t *testing.T, c obj)
		want   string
	}{
		{"undeclared volume", func(t *testing.T, c obj) {
			set(t, svc(c, "redis"), []any{"redis-aof:/data"}, "volumes")
		}, `volume "redis-aof" is not declared`},
		{"grace shorter than shutdown", func(t *testing.T, c obj) {
			set(t, svc(c, "worker"), "20s", "stop_grace_period")
		}, "stop_grace_period 20s is not longer than --shutdown-timeout 30s"},
		{"default grace", func(t *testing.T, c obj) {
			set(t, svc(c, "worker"), nil, "stop_grace_period")
		}, "stop_grace_period 10s"},
		{"missing setting", func(t *testing.T, c obj) {
			delete(svc(c, "worker")["environment"].(obj), "SPOOL_S3_BUCKET")
		}, "setting SPOOL_S3_BUCKET is not provided"},
		{"depends on unknown service", func(t *testing.T, c obj) {
			set(t, svc(c, "monitor"), obj{"minio": obj{"condition": "service_healthy"}}, "depends_on")
		}, `depends_on "minio"`},
		{"waits for health of a service without healthcheck", func(t *testing.T, c obj) {
			set(t, svc(c, "redis"), nil, "healthcheck")
		}, "waits for redis to be healthy, but it has no healthcheck"},
		{"monitor on every interface", func(t *testing.T, c obj) {
			set(t, svc(c, "monitor"), []any{"8080:8080"}, "ports")
		}, "published on every interface"},
		{"no AOF", func(t *testing.T, c obj) {
			set(t, svc(c, "redis"), []any{"redis-server"}, "command")
		}, "AOF persistence"},
		{"unpinned redis", func(t *testing.T, c obj) {
			set(t, svc(c, "redis"), "redis:latest", "image")
		}, `image "redis:latest"`},
		{"worker without health check", func(t *testing.T, c obj) {
			set(t, svc(c, "worker"), nil, "healthcheck")
		}, "long-running service has no healthcheck"},
		{"signing key off the volume", func(t *testing.T, c obj) {
			svc(c, "scheduler")["environment"].(obj)["SPOOL_SIGNING_KEY"] = "/tmp/signing.key"
		}, "the signing key (/tmp/signing.key) is not on a named volume"},
		{"no keys init", func(t *testing.T, c obj) {
			delete(mapping(c, "services"), "keys-init")
			delete(svc(c, "worker"), "depends_on")
			delete(svc(c, "scheduler"), "depends_on")
		}, "no one-shot `keys init` service writes the signing key to volume spool-keys"},
		{"monitor mounts the private key", func(t *testing.T, c obj) {
			set(t, svc(c, "monitor"), []any{"spool-keys:/var/lib/spool", "spool-public-keys:/var/lib/spool-public:ro"}, "volumes")
		}, "compose service monitor: a reader mounts volume spool-keys, which holds the private signing key"},
		{"monitor without trusted keys", func(t *testing.T, c obj) {
			delete(svc(c, "monitor")["environment"].(obj), "SPOOL_TRUSTED_KEYS")
		}, "compose service monitor: a reader has no SPOOL_TRUSTED_KEYS on a named volume"},
		{"public key never exported", func(t *testing.T, c obj) {
			set(t, svc(c, "keys-init"), []any{"keys", "init"}, "command")
		}, "no one-shot `keys init --public-dir` service writes the public key to volume spool-public-keys"},
		{"data dir off the key volume", func(t *testing.T, c obj) {
			svc(c, "worker")["environment"].(obj)["SPOOL_DATA_DIR"] = "/data"
		}, "compose service worker: the signing key (/data/keys/) is not on a named volume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := loadTestCompose(t)
			// The anchors share one environment map across services; give
			// each service its own so a mutation stays local.
			for _, name := range sortedKeys(mapping(c, "services")) {
				if env, ok := svc(c, name)["environment"].(obj); ok {
					cp := obj{}
					for k, v := range env {
						cp[k] = v
					}
					svc(c, name)["environment"] = cp
				}
			}
			tt.mutate(t, c)
			for _, p := range checkCompose(c) {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %q", tt.want, checkCompose(c))
		})
	}
}
