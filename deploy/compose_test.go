package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/stretchr/testify/require"
)

func loadTestCompose(t *testing.T) *types.Project {
	t.Helper()
	p, err := loadCompose("compose.yaml")
	require.NoError(t, err)
	return p
}

func TestCompose(t *testing.T) {
	t.Parallel()
	p := loadTestCompose(t)
	requireNoProblems(t, checkCompose(p))
	for _, want := range []string{"redis", "s3", "worker", "scheduler", "monitor"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("compose has no %s service", want)
		}
	}
	if d := p.Services["scheduler"].Deploy; d != nil && d.Replicas != nil && *d.Replicas > 1 {
		t.Errorf("compose runs %d schedulers, want one", *d.Replicas)
	}
	// With no environment, the defaults in ${VAR:-default} apply.
	worker := p.Services["worker"]
	require.True(t, slices.Contains(worker.Command, "--concurrency=8"), "worker command %q, deploy %+v: want the defaults --concurrency=8 and 3 replicas", worker.Command, worker.Deploy)
	require.NotNil(t, worker.Deploy, "worker command %q, deploy", worker.Command)
	require.NotNil(t, worker.Deploy.Replicas, "worker command %q, deploy %+v: want the defaults --concurrency=8 and 3 replicas", worker.Command, worker.Deploy)
	require.Equal(t, 3, *worker.Deploy.Replicas, "worker command %q, deploy %+v: want the defaults --concurrency=8 and 3 replicas", worker.Command, worker.Deploy)
	got := worker.Environment["SPOOL_S3_BUCKET"]
	require.NotNil(t, got, "worker SPOOL_S3_BUCKET")
	require.Equal(t, "spool", *got, "worker SPOOL_S3_BUCKET = %v, want the default spool", got)
}

func TestComposeAndKubernetesWorkersServeTheSameQueues(t *testing.T) {
	t.Parallel()
	cq, err := queuesOf(loadTestCompose(t).Services["worker"].Command)
	require.NoError(t, err)
	_, wc, err := workerContainer(loadTestBase(t).Docs)
	require.NoError(t, err)
	kq, err := queuesOf(stringsOf(list(wc, "args")))
	require.NoError(t, err)
	require.True(t, slices.Equal(cq, kq), "compose worker queues %v != Kubernetes worker queues %v", cq, kq)
}

func TestComposeChecksCatchBreakage(t *testing.T) {
	t.Parallel()
	volume := func(source, target string) types.ServiceVolumeConfig {
		return types.ServiceVolumeConfig{Type: types.VolumeTypeVolume, Source: source, Target: target}
	}
	tests := []struct {
		name, service string // service is "" when mutate edits the project
		mutate        func(p *types.Project, s *types.ServiceConfig)
		want          string
	}{
		{"undeclared volume", "redis", func(_ *types.Project, s *types.ServiceConfig) {
			s.Volumes = []types.ServiceVolumeConfig{volume("redis-aof", "/data")}
		}, `volume "redis-aof" is not declared`},
		{"grace shorter than shutdown", "worker", func(_ *types.Project, s *types.ServiceConfig) {
			s.StopGracePeriod = new(types.Duration(20 * time.Second))
		}, "stop_grace_period 20s is not longer than --shutdown-timeout 30s"},
		{"default grace", "worker", func(_ *types.Project, s *types.ServiceConfig) { s.StopGracePeriod = nil },
			"stop_grace_period 10s"},
		{"missing setting", "worker", func(_ *types.Project, s *types.ServiceConfig) {
			delete(s.Environment, "SPOOL_S3_BUCKET")
		}, "setting SPOOL_S3_BUCKET is not provided"},
		{"depends on unknown service", "monitor", func(_ *types.Project, s *types.ServiceConfig) {
			s.DependsOn = types.DependsOnConfig{"minio": {Condition: types.ServiceConditionHealthy}}
		}, `depends_on "minio"`},
		{"waits for health of a service without healthcheck", "redis", func(_ *types.Project, s *types.ServiceConfig) {
			s.HealthCheck = nil
		}, "waits for redis to be healthy, but it has no healthcheck"},
		{"monitor on every interface", "monitor", func(_ *types.Project, s *types.ServiceConfig) {
			s.Ports = []types.ServicePortConfig{{Target: 8080, Published: "8080"}}
		}, "published on every interface"},
		{"no AOF", "redis", func(_ *types.Project, s *types.ServiceConfig) { s.Command = []string{"redis-server"} },
			"AOF persistence"},
		{"unpinned redis", "redis", func(_ *types.Project, s *types.ServiceConfig) { s.Image = "redis:latest" },
			`image "redis:latest"`},
		{"worker without health check", "worker", func(_ *types.Project, s *types.ServiceConfig) { s.HealthCheck = nil },
			"long-running service has no healthcheck"},
		{"signing key off the volume", "scheduler", func(_ *types.Project, s *types.ServiceConfig) {
			s.Environment["SPOOL_SIGNING_KEY"] = new("/tmp/signing.key")
		}, "the signing key (/tmp/signing.key) is not on a named volume"},
		{"no keys init", "", func(p *types.Project, _ *types.ServiceConfig) {
			delete(p.Services, "keys-init")
		}, "no one-shot `keys init` service writes the signing key to volume spool-keys"},
		{"monitor mounts the private key", "monitor", func(_ *types.Project, s *types.ServiceConfig) {
			s.Volumes = []types.ServiceVolumeConfig{volume("spool-keys", "/var/lib/spool"), volume("spool-public-keys", "/var/lib/spool-public")}
		}, "compose service monitor: a reader mounts volume spool-keys, which holds the private signing key"},
		{"monitor without trusted keys", "monitor", func(_ *types.Project, s *types.ServiceConfig) {
			delete(s.Environment, "SPOOL_TRUSTED_KEYS")
		}, "compose service monitor: a reader has no SPOOL_TRUSTED_KEYS on a named volume"},
		{"public key never exported", "keys-init", func(_ *types.Project, s *types.ServiceConfig) {
			s.Command = []string{"keys", "init"}
		}, "no one-shot `keys init --public-dir` service writes the public key to volume spool-public-keys"},
		{"data dir off the key volume", "worker", func(_ *types.Project, s *types.ServiceConfig) {
			s.Environment["SPOOL_DATA_DIR"] = new("/data")
		}, "compose service worker: the signing key (/data/keys/) is not on a named volume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := loadTestCompose(t)
			if tt.service == "" {
				tt.mutate(p, nil)
			} else {
				s := p.Services[tt.service]
				tt.mutate(p, &s)
				p.Services[tt.service] = s
			}
			requireProblem(t, checkCompose(p), tt.want)
		})
	}
}

// TestComposeSchemaRejectsBrokenFiles: the compose specification's schema
// and references, which compose-go checks on load.
func TestComposeSchemaRejectsBrokenFiles(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("compose.yaml")
	require.NoError(t, err)
	tests := []struct{ name, old, new, want string }{
		{"misspelt field", "stop_grace_period: 45s", "stop_grace_periode: 45s", "stop_grace_periode"},
		{"undeclared volume", "  spool-public-keys:\n", "", "spool-public-keys"},
		{"bad duration", "stop_grace_period: 45s", "stop_grace_period: soon", "soon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "compose.yaml")
			require.NoError(t, os.WriteFile(path, []byte(mustReplace(t, "compose.yaml", string(data), tt.old, tt.new)), 0o644))
			_, err := loadCompose(path)
			require.Error(t, err, "load: %v, want an error naming %q", err, tt.want)
			require.Contains(t, err.Error(), tt.want, "load: %v, want an error naming %q", err, tt.want)
		})
	}
}
