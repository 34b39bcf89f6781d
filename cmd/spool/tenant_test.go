package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/spooltype"
)

// TestTenantStatusCountsInOneOrMany: `tenant show` says "1 root chain in
// flight", not "1 root chains".
func TestTenantStatusCountsInOneOrMany(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "runs       3 · 0 root chains in flight\n", 1: "runs       3 · 1 root chain in flight\n",
		2: "runs       3 · 2 root chains in flight\n"} {
		var b bytes.Buffer
		printTenantStatus(&b, &spooltype.Tenant{Tenant: "a", Runs: 3, RunsInFlight: n, Sources: map[string]string{}})
		require.Contains(t, b.String(), want)
	}
}
