package e2e

import (
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// TestTagsAndSearch: runs started with tags (the API's tags, the CLI's
// --tag) carry them, and so do their children; thread list and graph
// list --tag find exactly the runs that carry every tag given, newest
// first, page by page with the cursor each page prints (CLI --json's
// next_cursor, the API's X-Next-Cursor and Link headers), each run once;
// --since and --until bound them; bad tags and cursors are one-line
// errors. The runs are registered through the API: SPOOL_TEST_TAG_RUNS
// sets how many (2,000 here; the scale is 10,000).
func TestTagsAndSearch(t *testing.T) {
	t.Parallel()
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("SPOOL_TEST_TAG_RUNS")); err == nil {
		n = v
	}
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	srv := startAPI(t, e)
	ids := submitRuns(t, srv.base, n, 8, func(i int) spooltype.RunRequest {
		tags := map[string]string{"customer": strconv.Itoa(i % 10), "batch": "b" + strconv.Itoa(i%3)}
		return spooltype.RunRequest{Directive: "t/slow", Model: "script:scripts/api.yaml", Tags: tags}
	})
	want := map[string]bool{} // customer=4, batch=b1
	for i, id := range ids {
		if i%10 == 4 && i%3 == 1 {
			want[id] = true
		}
	}

	// The CLI, page by page.
	start := time.Now()
	seen := map[string]bool{}
	var cursor string
	pages := 0
	for {
		args := []string{"thread", "list", "--tag", "customer=4", "--tag", "batch=b1", "--limit", "25", "--json"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		r := e.Spool(args...)
		require.Equal(t, 0, r.Code, r.Stderr)
		var page struct {
			Threads    []registry.Record `json:"threads"`
			NextCursor string            `json:"next_cursor"`
		}
		r.JSON(t, &page)
		pages++
		var last time.Time
		for i, rec := range page.Threads {
			require.True(t, want[rec.ThreadID], "%s carries the tags", rec.ThreadID)
			require.False(t, seen[rec.ThreadID], "%s listed once", rec.ThreadID)
			require.Equal(t, "4", rec.Tags["customer"])
			if i > 0 {
				require.False(t, rec.CreatedAt.After(last), "newest first")
			}
			last = rec.CreatedAt
			seen[rec.ThreadID] = true
		}
		if page.NextCursor == "" {
			require.Empty(t, r.Stderr, "the last page says nothing")
			break
		}
		require.Contains(t, r.Stderr, "--cursor "+page.NextCursor)
		cursor = page.NextCursor
	}
	require.Len(t, seen, len(want), "every tagged run, once")
	t.Logf("%d runs; %d carry customer=4 and batch=b1, listed in %d pages of 25 by the CLI in %s",
		n, len(want), pages, time.Since(start).Round(time.Millisecond))

	// The API: the same filter, the next page a header away.
	tr := newOpenAPITransport(t)
	raw := apiCall{t: t, hc: &http.Client{Transport: tr}, base: srv.base}
	q := url.Values{"tag": {"customer=4", "batch=b1"}, "limit": {"10"}}
	status, h, body := raw.do("GET", "/v1/threads?"+q.Encode(), "")
	require.Equal(t, 200, status, string(body))
	next := h.Get("X-Next-Cursor")
	require.NotEmpty(t, next)
	require.Contains(t, h.Get("Link"), `rel="next"`)
	got := 0
	for next != "" {
		q.Set("cursor", next)
		status, h, body = raw.do("GET", "/v1/threads?"+q.Encode(), "")
		require.Equal(t, 200, status, string(body))
		got += strings.Count(string(body), `"thread_id"`)
		next = h.Get("X-Next-Cursor")
	}
	require.Equal(t, len(want)-10, got, "the pages after the first hold the rest")
	raw.problem(400, "bad_request", "GET", "/v1/threads?tag=nokey", "")
	raw.problem(400, "bad_request", "GET", "/v1/threads?cursor=zzz", "")

	// Time bounds: a window after every run holds none; one up to now all.
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r := e.Spool("thread", "list", "--tag", "customer=4", "--since", future, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Empty(t, listedThreads(t, r))
	r = e.Spool("thread", "list", "--tag", "customer=4", "--until", "0s", "--limit", "0", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Len(t, listedThreads(t, r), n/10)

	// Bad input: one line, exit 2.
	for _, bad := range [][]string{{"--tag", "customer"}, {"--tag", "bad key=x"}, {"--since", "yesterday"}, {"--cursor", "nope"}} {
		r := e.Spool(append([]string{"thread", "list"}, bad...)...)
		require.Equal(t, 2, r.Code, "%v: %s", bad, r.Stderr)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.Stderr), "\n")+1, "one line: %s", r.Stderr)
	}
	r = e.Spool("thread", "run", "t/slow", "--tag", "=x")
	require.Equal(t, 2, r.Code, r.Stderr)

	// The CLI's --tag on a run and a child of it.
	r = e.Spool("thread", "run", "t/slow", "--model", "script:scripts/api.yaml", "--tag", "team=ops", "--tag", "ticket=T-9", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var root registry.Record
	r.JSON(t, &root)
	require.Equal(t, map[string]string{"team": "ops", "ticket": "T-9"}, root.Tags)
	r = e.Spool("thread", "run", "t/slow", "--model", "script:scripts/api.yaml", "--parent", root.ThreadID, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var child registry.Record
	r.JSON(t, &child)
	require.Equal(t, root.Tags, child.Tags, "a child carries its root's tags")
	r = e.Spool("thread", "run", "t/slow", "--parent", root.ThreadID, "--tag", "team=other")
	require.Equal(t, 2, r.Code, r.Stderr)
	require.Contains(t, r.Stderr, "tag")
	r = e.Spool("thread", "list", "--tag", "team=ops", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Len(t, listedThreads(t, r), 2, "the root and its child")
}
