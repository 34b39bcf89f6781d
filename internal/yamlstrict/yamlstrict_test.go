package yamlstrict

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type turn struct {
	Text  string `yaml:"text"`
	Tools []struct {
		Tool  string `yaml:"tool"`
		Input any    `yaml:"input"`
	} `yaml:"tool_calls"`
}

type common struct {
	Latency string `yaml:"latency"`
}

type file struct {
	Window     int               `yaml:"context_window"`
	Directives map[string][]turn `yaml:"directives"`
	Plain      string
	Skipped    string `yaml:"-"`
	Common     common `yaml:",inline"`
}

// TestDecode: an unknown key is named with the keys beside it, at every
// depth; a mistyped value keeps yaml's words; a known document decodes;
// an empty one is nothing.
func TestDecode(t *testing.T) {
	t.Parallel()
	var f file
	err := Decode([]byte("turns: []\n"), &f)
	require.EqualError(t, err, "line 1: unknown key turns (expected context_window, directives, plain or latency)")
	var e *Error
	require.ErrorAs(t, err, &e)

	err = Decode([]byte("directives:\n  a:\n    - text: hi\n      tool_calls:\n        - {tool: x, args: {}}\n"), &f)
	require.EqualError(t, err, "line 5: unknown key args (expected tool or input)")

	err = Decode([]byte("context_window: many\nlatnecy: 1s\n"), &f)
	require.EqualError(t, err, "line 1: cannot unmarshal !!str `many` into int; line 2: unknown key latnecy (expected context_window, directives, plain or latency)")

	f = file{}
	require.NoError(t, Decode([]byte("context_window: 5\nlatency: 1s\ndirectives: {a: [{text: hi}]}\n"), &f))
	require.Equal(t, 5, f.Window)
	require.Equal(t, "1s", f.Common.Latency)
	require.NoError(t, Decode(nil, &f))

	require.ErrorContains(t, Decode([]byte("a: [\n"), &f), "yaml: line")
}
