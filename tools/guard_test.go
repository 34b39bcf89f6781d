package tools

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

func TestBoundSmallUnchanged(t *testing.T) {
	t.Parallel()
	store := blobstore.NewMemory()
	in := Result{Output: strings.Repeat("x", DefaultMaxResultBytes), IsError: true}
	out, err := Bound(context.Background(), store, blobkey.ToolResult("th", "c1"), in, 0)
	require.NoError(t, err)
	require.Equal(t, in, out)
	infos, _ := store.List(context.Background(), "")
	require.Empty(t, infos, "nothing stored for a result that fits")
}

func TestBoundArtifactRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := blobstore.NewMemory()
	var b strings.Builder
	for i := 0; b.Len() < 100_000; i++ {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("é", i%7))
		b.WriteString("\n")
	}
	full := b.String()
	key := blobkey.ToolResult("th-1", "toolu_01/ab:c")
	require.Equal(t, "threads/th-1/artifacts/toolu_01_ab_c.txt", key)

	out, err := Bound(ctx, store, key, Result{Output: full, IsError: true}, 4096)
	require.NoError(t, err)
	require.LessOrEqual(t, len(out.Output), 4096)
	require.True(t, out.IsError)
	require.Equal(t, key, out.Artifact)
	require.True(t, utf8.ValidString(out.Output))
	require.Contains(t, out.Output, "the full output is artifact "+key)
	require.Contains(t, out.Output, " of 100")
	head, _, _ := strings.Cut(out.Output, "\n\n[spool: output cut")
	require.True(t, strings.HasPrefix(full, head))
	require.Greater(t, len(head), 2000)

	stored, err := store.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, full, string(stored))

	// The model can page through it with fs_read.
	read := Builtins(FSConfig{})[1]
	r, err := read.Run(ctx, &Env{ThreadID: "th-1", TreeID: "tree", Store: store}, []byte(`{"artifact":"`+key+`","offset":3,"limit":1}`))
	require.NoError(t, err)
	require.Equal(t, "line éé\n[lines 3-3 of ", r.Output[:len("line éé\n[lines 3-3 of ")])
}

func TestBoundNeedsStore(t *testing.T) {
	t.Parallel()
	_, err := Bound(context.Background(), nil, "k", Result{Output: strings.Repeat("x", 1000)}, 512)
	require.Error(t, err)
}

// TestBoundProperty: for any output and limit, the view fits the limit, starts
// with a prefix and ends with a suffix of the output, stays valid UTF-8 when
// the output is, and the artifact holds the whole output.
func TestBoundProperty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "\n", "é", "日", "😀", "\xff", " "}
	for i := range 500 {
		var b strings.Builder
		n := rng.IntN(20_000)
		for b.Len() < n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		full := b.String()
		limit := rng.IntN(8000) - 100
		store := blobstore.NewMemory()
		out, err := Bound(ctx, store, blobkey.ToolResult("th", "c"), Result{Output: full}, limit)
		require.NoError(t, err)
		eff := max(limit, MinMaxResultBytes)
		if limit <= 0 {
			eff = DefaultMaxResultBytes
		}
		if len(full) <= eff {
			require.Equal(t, full, out.Output, "case %d", i)
			continue
		}
		require.LessOrEqual(t, len(out.Output), eff, "case %d", i)
		head, tail, ok := strings.Cut(out.Output, "\n\n[spool: output cut")
		require.True(t, ok)
		_, tail, ok = strings.Cut(tail, "]\n\n")
		require.True(t, ok)
		require.True(t, strings.HasPrefix(full, head), "case %d", i)
		require.True(t, strings.HasSuffix(full, tail), "case %d", i)
		if utf8.ValidString(full) {
			require.True(t, utf8.ValidString(out.Output), "case %d", i)
		}
		stored, err := store.Get(ctx, out.Artifact)
		require.NoError(t, err)
		require.Equal(t, full, string(stored))
	}
}

func FuzzBound(f *testing.F) {
	f.Add("héllo wörld", 512)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		s = strings.Repeat(s, 1+600/(len(s)+1))
		out, err := Bound(context.Background(), blobstore.NewMemory(), "k/a.txt", Result{Output: s}, limit%5000)
		if err != nil {
			t.Fatal(err)
		}
		eff := max(limit%5000, MinMaxResultBytes)
		if limit%5000 <= 0 {
			eff = DefaultMaxResultBytes
		}
		if len(out.Output) > max(eff, len(s)) || (len(s) > eff && len(out.Output) > eff) {
			t.Fatalf("view of %d bytes for limit %d", len(out.Output), eff)
		}
		if utf8.ValidString(s) && !utf8.ValidString(out.Output) {
			t.Fatal("view split a rune")
		}
	})
}
