package orchestrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestTagsCarriedByTheTree: a root's tags are its children's and their
// children's, listed by tag with the root; a child that names other tags
// is refused (tag_mismatch) and one that names the same is started; bad
// tags are refused before anything is stored; ThreadsPage pages with a
// cursor; ParseTimeBound reads times, dates and durations ago.
func TestTagsCarriedByTheTree(t *testing.T) {
	t.Parallel()
	o, _, digest := startSetup(t)
	ctx := t.Context()
	tags := map[string]string{"customer": "42", "batch": "b1"}
	req := func(parent string, tags map[string]string) StartRequest {
		return StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, Bundle: digest, ParentID: parent, Tags: tags}
	}
	root, err := o.Start(ctx, req("", tags))
	require.NoError(t, err)
	require.Equal(t, tags, root.Tags)
	child, err := o.Start(ctx, req(root.ThreadID, nil))
	require.NoError(t, err)
	require.Equal(t, tags, child.Tags, "a child has its root's tags")
	grand, err := o.Start(ctx, req(child.ThreadID, tags))
	require.NoError(t, err, "naming the same tags is no mismatch")
	require.Equal(t, tags, grand.Tags)
	_, err = o.Start(ctx, req(child.ThreadID, map[string]string{"customer": "7"}))
	require.ErrorIs(t, err, &thread.AdmissionError{Code: thread.CodeTagMismatch})
	_, err = o.Start(ctx, req("", map[string]string{"bad key": "x"}))
	require.ErrorIs(t, err, &thread.AdmissionError{Code: thread.CodeTagInvalid})
	other, err := o.Start(ctx, req("", map[string]string{"customer": "7"}))
	require.NoError(t, err)

	recs, err := o.Threads(ctx, Filter{Tags: map[string]string{"customer": "42"}})
	require.NoError(t, err)
	require.Len(t, recs, 3, "the whole tree, and only it")
	for _, r := range recs {
		require.NotEqual(t, other.ThreadID, r.ThreadID)
	}
	page, next, err := o.ThreadsPage(ctx, Filter{Tags: map[string]string{"batch": "b1"}, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.NotEmpty(t, next)
	cur, err := ParseCursor(next)
	require.NoError(t, err)
	rest, next, err := o.ThreadsPage(ctx, Filter{Tags: map[string]string{"batch": "b1"}, Limit: 2, After: &cur})
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.Empty(t, next, "the last page")
	require.Equal(t, root.ThreadID, rest[0].ThreadID, "oldest last")

	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-12-01T10:00:00Z": time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		"2026-12-01":           time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		"90m":                  now.Add(-90 * time.Minute),
		"7d":                   now.Add(-7 * 24 * time.Hour),
	} {
		got, err := ParseTimeBound(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %v", in, got)
	}
	for _, bad := range []string{"yesterday", "-5m", "12/01/2026"} {
		_, err := ParseTimeBound(bad, now)
		require.Error(t, err, bad)
	}
}
