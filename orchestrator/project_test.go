package orchestrator

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/testenv"
)

const projectTestDirective = "<!-- a test directive -->\n# Leads\n\nFind {input:niche} in {input:city}.\n\n```xml\n" +
	`<directive name="leads" version="1.0.0">
  <metadata>
    <description>Find leads</description>
    <category>test</category>
    <author>test</author>
    <model tier="fast" />
    <limits turns="3" spend="0.1" />
    <permissions>
      <execute><tool>rye.file-system.*</tool></execute>
    </permissions>
  </metadata>
  <inputs>
    <input name="city" type="string" required="true">Where</input>
    <input name="niche" type="string" default="dentists">What</input>
  </inputs>
  <outputs>
    <output name="leads_file" required="true">Where they went</output>
  </outputs>
</directive>
` + "```\n"

// projectSetup is a Project over a bundle with one directive, test/leads,
// loaded the way Orchestrator.Project loads it (without the registry).
func projectSetup(t testing.TB) *Project {
	t.Helper()
	store := blobstore.NewMemory()
	digest := leadsBundle(t, store)
	b, err := directive.LoadBundle(t.Context(), store, digest)
	require.NoError(t, err)
	return &Project{Digest: digest, Bundle: b}
}

// leadsBundle builds a bundle with one directive, test/leads
// (projectTestDirective), into store and returns its digest.
func leadsBundle(tb testing.TB, store blobstore.Store) string {
	tb.Helper()
	dir := tb.TempDir()
	testenv.WriteFile(tb, filepath.Join(dir, ".ai", "directives", "test", "leads.md"), projectTestDirective)
	digest, err := directive.BuildBundle(tb.Context(), store, dir, "", nil)
	require.NoError(tb, err)
	return digest
}

// TestProjectDirectiveCached: a directive is parsed once per Project; every
// spelling of its name, from any goroutine, gets the same value, equal to
// a fresh parse; failures are not cached.
func TestProjectDirectiveCached(t *testing.T) {
	t.Parallel()
	p := projectSetup(t)
	want, _, err := p.Bundle.Resolver().Resolve("test/leads")
	require.NoError(t, err)
	require.Equal(t, "leads", want.Name)

	first, err := p.Directive("test/leads")
	require.NoError(t, err)
	if diff := cmp.Diff(want, first); diff != "" {
		t.Fatalf("cached directive (-want +got):\n%s", diff)
	}
	var wg sync.WaitGroup
	got := make([]*directive.Directive, 16)
	for i := range got {
		wg.Go(func() {
			name := []string{"test/leads", " test/leads.md", "test/leads.md"}[i%3]
			d, err := p.Directive(name)
			if err == nil {
				got[i] = d
			}
		})
	}
	wg.Wait()
	for i, d := range got {
		require.Same(t, first, d, "call %d", i)
	}

	// A name that does not resolve fails each time, the same way as an
	// uncached resolve, and is not kept.
	for _, name := range []string{"test/missing", "../escape", "", "test/leads.md.md"} {
		_, _, werr := p.Bundle.Resolver().Resolve(name)
		require.Error(t, werr, name)
		for range 2 {
			_, err := p.Directive(name)
			require.EqualError(t, err, werr.Error(), name)
		}
	}
	n := 0
	p.directives.Range(func(k, _ any) bool { n++; return true })
	require.Equal(t, 1, n, "cache entries")
}

func BenchmarkProjectDirective(b *testing.B) {
	p := projectSetup(b)
	b.Run("impl=old", func(b *testing.B) { // what Directive did before the cache
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := p.Bundle.Resolver().Resolve("test/leads"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Directive("test/leads"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
