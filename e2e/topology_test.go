package e2e

import (
	"testing"

	"github.com/spool-run/spool/internal/testing/testenv"
)

// onEachTopology runs body once per Redis topology (standalone, a
// three-node Cluster, a master+replica behind a Sentinel), as parallel
// subtests named after the topology: the same spool, the same test, only
// SPOOL_REDIS_URL differs.
func onEachTopology(t *testing.T, body func(t *testing.T, top testenv.Topology)) {
	t.Helper()
	for _, top := range testenv.Topologies {
		t.Run(string(top), func(t *testing.T) {
			t.Parallel()
			body(t, top)
		})
	}
}
