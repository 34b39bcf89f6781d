package directive

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
)

func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/implement_dashboard.md")
	require.NoError(b, err)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		_, err := Parse("x.md", data)
		require.NoError(b, err)
	}
}

func BenchmarkLoadBundleCached(b *testing.B) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	dg, err := BuildBundle(ctx, store, "testdata/..", "", nil)
	require.NoError(b, err)
	c := NewBundleCache(4, 1<<20)
	for b.Loop() {
		_, err := c.Load(ctx, store, dg)
		require.NoError(b, err)
	}
}
