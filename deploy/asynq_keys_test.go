package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAsynqKeyNamesMatchAsynqSource pins pendingKey/activeKey to the asynq
// version in go.mod: if an upgrade renames the lists, the KEDA triggers
// would silently read empty keys, so this reads asynq's own
// internal/base/base.go from the module cache and checks the key builders.
func TestAsynqKeyNamesMatchAsynqSource(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`github\.com/hibiken/asynq (v[^\s]+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod does not require github.com/hibiken/asynq")
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), "github.com", "hibiken", "asynq@"+string(m[1]), "internal", "base", "base.go")
	data, err := os.ReadFile(src)
	if os.IsNotExist(err) {
		t.Skipf("asynq %s not in the module cache (run go mod download)", m[1])
	}
	require.NoError(t, err)
	code := strings.Join(strings.Fields(string(data)), " ")
	for _, want := range []string{
		`func QueueKeyPrefix(qname string) string { return "asynq:{" + qname + "}:" }`,
		`func PendingKey(qname string) string { return QueueKeyPrefix(qname) + "pending" }`,
		`func ActiveKey(qname string) string { return QueueKeyPrefix(qname) + "active" }`,
	} {
		if !strings.Contains(code, want) {
			t.Errorf("%s no longer has %q; update pendingKey/activeKey and deploy/k8s/keda.yaml", src, want)
		}
	}
	got := pendingKey("q1")
	require.Equal(t, "asynq:{q1}:pending", got, "pendingKey")
	got = activeKey("q1")
	require.Equal(t, "asynq:{q1}:active", got, "activeKey")
}
