package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFollowShowsChildren: `thread run --wait --follow` of a fan-out shows
// how its children are doing as they run, not only the root: each line
// counts them by state, the last one all done.
func TestFollowShowsChildren(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, fanProject(), "4")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	res := e.SpoolContext(ctx, quietEnv(), "thread", "run", "f/root", "--model", "script:scripts/fan.yaml", "--wait", "--follow")
	require.Equal(t, 0, res.Code, res.Stderr)
	var progress []string
	for _, line := range strings.Split(strings.TrimSpace(res.Stderr), "\n") {
		if m := regexp.MustCompile(` · (8 children: .*)$`).FindStringSubmatch(line); m != nil {
			progress = append(progress, m[1])
		}
	}
	require.NotEmpty(t, progress, "no line counts the children:\n%s", res.Stderr)
	require.Equal(t, "8 children: 8 done", progress[len(progress)-1], res.Stderr)
	require.Regexp(t, `running|queued`, strings.Join(progress, "\n"), "the children were seen running:\n%s", res.Stderr)
}
