package directive

import (
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// A capability that names no tool or directive the project has is a
// warning, with the nearest known name when it looks misspelt.
func TestLint(t *testing.T) {
	known := Known{
		Tools:      []string{"rye/file-system/fs_write", "rye/file-system/fs_read", "rye/agent/threads/thread_directive", "acme/scrape"},
		MCPServers: []string{"files"},
		Directives: []string{"demo/hello", "test/limits/depth_child", "t/x"},
	}
	d, err := Parse("t.md", []byte(wrap(`<permissions>
  <execute>
    <tool>rye/file-system/fs_wirte</tool>
    <tool>rye.file-system.*</tool>
    <tool>acme/scrape</tool>
    <tool>mcp/files/read</tool>
    <tool>mcp.files.*</tool>
    <tool>mcp/other/read</tool>
    <tool>rye.primary-tools.*</tool>
    <tool>nothing/like/it</tool>
    <directive>demo/helo</directive>
    <directive>t/y</directive>
    <directive>test/*</directive>
    <knowledge>whatever</knowledge>
  </execute>
  <sign><tool>*</tool></sign>
  <fetch><knowledge>k/*</knowledge><tool>rye/file-system/fs_read</tool></fetch>
  <cap>rye.execute.*</cap>
  <cap>*</cap>
</permissions>`)))
	require.NoError(t, err)
	want := []string{
		"<permissions>: rye.execute.tool.rye.file-system.fs_wirte names no known tool (did you mean rye/file-system/fs_write?)",
		"<permissions>: rye.execute.tool.mcp.other.read names no known tool",
		"<permissions>: rye.execute.tool.rye.primary-tools.* matches no known tool",
		"<permissions>: rye.execute.tool.nothing.like.it names no known tool",
		"<permissions>: rye.execute.directive.demo.helo names no known directive (did you mean demo/hello?)",
		"<permissions>: rye.execute.directive.t.y names no known directive",
	}
	if diff := cmp.Diff(want, Lint(d, known)); diff != "" {
		t.Errorf("Lint (-want +got):\n%s", diff)
	}
}

func TestResolverNames(t *testing.T) {
	r := &Resolver{Spaces: []Space{
		{Name: SpaceProject, FS: fstest.MapFS{"a/x.md": {}, "b.md": {}, "notes.txt": {}}},
		{Name: SpaceUser, FS: fstest.MapFS{"a/x.md": {}, "u.md": {}}},
		SystemSpace(),
	}}
	names, err := r.Names()
	require.NoError(t, err)
	require.Equal(t, []string{"a/x", "b", DefaultContinuation, "u"}, names)
}

// TestResolverSuggest: a name one or two edits from a directive's is
// told that directive; one far from all of them, nothing.
func TestResolverSuggest(t *testing.T) {
	r := &Resolver{Spaces: []Space{{Name: SpaceProject, FS: fstest.MapFS{"mine/sum.md": {}, "demo/hello.md": {}}}}}
	require.Equal(t, "mine/sum", r.Suggest("mine/summ"))
	require.Equal(t, "demo/hello", r.Suggest("demo/helo"))
	require.Equal(t, "demo/hello", r.Suggest("demo.hello"))
	require.Empty(t, r.Suggest("other/thing"))
}
