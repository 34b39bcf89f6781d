package directive

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseGraphPermission: <execute><graph> names the graphs a thread
// may start (the graph's capability, rye.execute.graph.<dotted name>).
func TestParseGraphPermission(t *testing.T) {
	d, err := Parse("t.md", []byte(wrap(`<permissions><execute><graph>review/pr</graph><graph>ops/*</graph></execute></permissions>`)))
	require.NoError(t, err)
	require.Equal(t, []string{"rye.execute.graph.review.pr", "rye.execute.graph.ops.*"}, d.Permissions)
}
