package registry

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestTagListing: a run's tags are stored and indexed; List by tags
// reads the runs that carry every tag, newest first, within the time
// bounds, page by page with a cursor that neither skips nor repeats a
// run (runs created in the same millisecond included); Forget takes a
// run out of its tags' indexes and Restore puts it back.
func TestTagListing(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	lim := thread.DefaultLimits()
	var batch []string
	for i := range 30 {
		tags := map[string]string{"customer": "42", "batch": fmt.Sprint(i % 3)}
		if i%5 == 0 {
			tags = map[string]string{"customer": "7"}
		}
		id := fmt.Sprintf("r%02d", i)
		rec, err := f.reg.Register(f.ctx, NewThread{ThreadID: id, Directive: "t/x", Limits: lim, Tags: tags})
		require.NoError(t, err)
		require.Equal(t, tags, rec.Tags)
		require.Equal(t, tags, f.get(t, id).Tags, "stored")
		if tags["batch"] == "1" {
			batch = append([]string{id}, batch...) // newest first
		}
	}
	ids := func(recs []*Record) []string {
		out := []string{}
		for _, r := range recs {
			out = append(out, r.ThreadID)
		}
		return out
	}
	recs, err := f.reg.List(f.ctx, Filter{Tags: map[string]string{"customer": "42", "batch": "1"}})
	require.NoError(t, err)
	require.Equal(t, batch, ids(recs), "every tag, newest first")

	// Pages of 3 with the cursor of the last of each.
	var paged []string
	var after *Cursor
	for {
		page, err := f.reg.List(f.ctx, Filter{Tags: map[string]string{"customer": "42"}, After: after, Limit: 3})
		require.NoError(t, err)
		paged = append(paged, ids(page)...)
		if len(page) < 3 {
			break
		}
		c, err := ParseCursor(CursorOf(page[len(page)-1]).String())
		require.NoError(t, err)
		after = &c
	}
	all, err := f.reg.List(f.ctx, Filter{Tags: map[string]string{"customer": "42"}})
	require.NoError(t, err)
	require.Len(t, all, 24)
	require.Equal(t, ids(all), paged, "the pages are the listing, once each")

	// Time bounds (inclusive), on the index and on the records.
	mid := f.get(t, "r10").CreatedAt
	since, err := f.reg.List(f.ctx, Filter{Tags: map[string]string{"customer": "7"}, Since: mid})
	require.NoError(t, err)
	require.Equal(t, []string{"r25", "r20", "r15", "r10"}, ids(since))
	until, err := f.reg.List(f.ctx, Filter{Until: mid, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"r10", "r09"}, ids(until))

	// Forget leaves the index; Restore comes back to it.
	r05 := f.get(t, "r05")
	c := f.claim(t, "r05")
	_, err = f.reg.Commit(f.ctx, "r05", c.Version, Changes{Status: thread.StatusCompleted})
	require.NoError(t, err)
	done := f.get(t, "r05")
	require.NoError(t, f.reg.Forget(f.ctx, done))
	seven, err := f.reg.List(f.ctx, Filter{Tags: map[string]string{"customer": "7"}})
	require.NoError(t, err)
	require.Equal(t, []string{"r25", "r20", "r15", "r10", "r00"}, ids(seven))
	require.Zero(t, f.r.Client.ZScore(f.ctx, f.ks.TagThreads("customer=7", "r05"), "r05").Val())
	_, err = f.reg.Restore(f.ctx, done)
	require.NoError(t, err)
	seven, err = f.reg.List(f.ctx, Filter{Tags: map[string]string{"customer": "7"}})
	require.NoError(t, err)
	require.Equal(t, []string{"r25", "r20", "r15", "r10", "r05", "r00"}, ids(seven))
	require.Equal(t, r05.Tags, f.get(t, "r05").Tags)

	_, err = ParseCursor("not a cursor")
	require.Error(t, err)

}

// TestDirectiveIndexBackfill: runs registered before the directive index
// existed (here: taken out of it) are listed by directive from every
// record until the backfill has put each in the index, in batches that
// go on past runs of one millisecond, and from the index after; runs
// registered since are in it from their registration.
func TestDirectiveIndexBackfill(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	reg, err := New(Config{Client: f.r.Client, Keys: f.ks, Now: func() time.Time { return at }})
	require.NoError(t, err)
	for i := range 10 {
		d := []string{"t/a", "t/b"}[i%2]
		_, err := reg.Register(f.ctx, NewThread{ThreadID: fmt.Sprintf("d%02d", i), Directive: d, Limits: thread.DefaultLimits()})
		require.NoError(t, err)
	}
	require.Equal(t, int64(5), f.r.Client.ZCard(f.ctx, f.ks.DirectiveThreads("t/a", "d00")).Val(), "indexed at registration")
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.DirectiveThreads("t/a", "d00"), f.ks.DirectiveThreads("t/b", "d00")).Err())
	list := func() []string {
		recs, err := reg.List(f.ctx, Filter{Directive: "t/a"})
		require.NoError(t, err)
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.ThreadID)
		}
		slices.Sort(ids)
		return ids
	}
	want := []string{"d00", "d02", "d04", "d06", "d08"}
	require.Equal(t, want, list(), "before the backfill: read from every record")
	total, calls := 0, 0
	for {
		n, done, err := reg.BackfillDirectiveIndex(f.ctx, 3)
		require.NoError(t, err)
		total += n
		calls++
		require.Less(t, calls, 10, "the backfill goes on past runs of one millisecond")
		if done {
			break
		}
	}
	require.GreaterOrEqual(t, total, 10)
	require.Equal(t, int64(5), f.r.Client.ZCard(f.ctx, f.ks.DirectiveThreads("t/a", "d00")).Val())
	require.True(t, reg.directiveIndexed(f.ctx))
	require.Equal(t, want, list(), "after: from the index")
	n, done, err := reg.BackfillDirectiveIndex(f.ctx, 3)
	require.NoError(t, err)
	require.True(t, done)
	require.Zero(t, n, "once done, nothing more")
}
