package provider

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

var wireRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestWireName(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"rye/file-system/fs_write":           "rye__file-system__fs_write",
		"rye/agent/threads/directive_return": "rye__agent__threads__directive_return",
		"simple":                             "simple",
	}
	for id, want := range cases {
		require.Equal(t, want, WireName(id))
	}
	hashed := []string{"rye/x.y/z", "a__b", "a/_b", "a//b", "/a", "ünïcode/tool", "", string(make([]byte, 100))}
	for _, id := range hashed {
		w := WireName(id)
		require.Regexp(t, wireRe, w, id)
		require.Contains(t, w, "___", id)
	}
	names, err := NewToolNames(append(hashed, "rye/file-system/fs_write")...)
	require.NoError(t, err)
	for _, id := range append(hashed, "rye/file-system/fs_write") {
		require.Equal(t, id, names.ID(names.Wire(id)))
	}
	// An unknown simple encoding decodes; anything else passes through.
	require.Equal(t, "rye/other/tool", names.ID("rye__other__tool"))
	require.Equal(t, "zz___0123", names.ID("zz___0123"))
}

// FuzzToolNames checks the bijection: every wire name is API-valid and
// decodes back to its id through the request table, and distinct ids get
// distinct wire names.
func FuzzToolNames(f *testing.F) {
	for _, s := range []string{"rye/file-system/fs_write", "a__b", "a/b", "x.y", "", "a_/b", "très/long/" + string(make([]byte, 80))} {
		f.Add(s, "rye/file-system/fs_read")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		names, err := NewToolNames(a, b)
		if err != nil {
			t.Fatalf("collision for %q %q: %v", a, b, err)
		}
		for _, id := range []string{a, b} {
			w := names.Wire(id)
			if !wireRe.MatchString(w) {
				t.Fatalf("wire name %q for %q is not API-valid", w, id)
			}
			if got := names.ID(w); got != id {
				t.Fatalf("round trip %q -> %q -> %q", id, w, got)
			}
		}
		if a != b && names.Wire(a) == names.Wire(b) {
			t.Fatalf("%q and %q share wire name %q", a, b, names.Wire(a))
		}
	})
}
