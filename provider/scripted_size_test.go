package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScriptSizeLimit: a script over MaxScriptBytes is refused before it
// is parsed, read from a file or given as bytes; one just under it
// loads.
func TestScriptSizeLimit(t *testing.T) {
	t.Parallel()
	script := func(n int) []byte {
		var b strings.Builder
		b.WriteString("directives:\n  \"*\":\n")
		for b.Len() < n-40 {
			b.WriteString("    - text: \"turn {{.turn}}\"\n")
		}
		return []byte(b.String())
	}
	_, err := ParseScript("big.yaml", script(MaxScriptBytes+100))
	require.ErrorContains(t, err, `script "big.yaml": `)
	require.ErrorContains(t, err, "over the 1048576 (1 MiB) a script may hold")
	_, err = NewScripted("big.yaml", func(string) ([]byte, error) { return script(MaxScriptBytes + 100), nil })
	require.ErrorContains(t, err, "1 MiB")
	_, err = ParseScript("ok.yaml", script(MaxScriptBytes-100))
	require.NoError(t, err)
}

// TestScriptCacheBounded: the parsed scripts the provider keeps hold at
// most maxCachedScriptBytes of script between them, the least recently
// used going first.
func TestScriptCacheBounded(t *testing.T) {
	// Not parallel: it fills the package's cache.
	for i := range 12 {
		var b strings.Builder
		fmt.Fprintf(&b, "directives:\n  \"d%d\":\n", i)
		for b.Len() < 600<<10 {
			b.WriteString("    - text: \"turn {{.turn}}\"\n")
		}
		data := []byte(b.String())
		_, err := NewScripted(fmt.Sprintf("s%d.yaml", i), func(string) ([]byte, error) { return data, nil })
		require.NoError(t, err)
		require.LessOrEqual(t, cachedScriptBytes.Load(), int64(maxCachedScriptBytes), "after %d scripts", i+1)
	}
	require.Less(t, parsedScripts.Len(), 12)
}
