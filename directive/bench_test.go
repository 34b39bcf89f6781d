package directive

import (
	"context"
	"os"
	"testing"

	"github.com/spool-run/spool/blobstore"
)

func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/implement_dashboard.md")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("x.md", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadBundleCached(b *testing.B) {
	ctx := context.Background()
	store := blobstore.NewMemory()
	dg, err := BuildBundle(ctx, store, "testdata/..", "", nil)
	if err != nil {
		b.Fatal(err)
	}
	c := NewBundleCache(4, 1<<20)
	for b.Loop() {
		if _, err := c.Load(ctx, store, dg); err != nil {
			b.Fatal(err)
		}
	}
}
