package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/launch"
)

// `spool directive validate` knows the tools the worker implements itself,
// so a directive that asks for them is not warned of an unknown tool.
func TestWorkerToolsKnownToValidate(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, []string{threadDirectiveID, orchestratorID, directiveReturnID}, launch.WorkerTools)
}
