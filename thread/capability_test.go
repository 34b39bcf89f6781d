package thread

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestToolCapability(t *testing.T) {
	tests := map[string]string{
		"scraping/gmaps/scrape_gmaps":        "rye.execute.tool.scraping.gmaps.scrape_gmaps",
		"rye/agent/threads/thread_directive": "rye.execute.tool.rye.agent.threads.thread_directive",
		"rye.file-system.fs_write":           "rye.execute.tool.rye.file-system.fs_write",
	}
	for in, want := range tests {
		if got := ToolCapability(in); got != want {
			t.Errorf("ToolCapability(%q) = %q, want %q", in, got, want)
		}
	}
	if got, want := Capability(PrimaryLoad, "knowledge", "agency-kiwi/x"), "rye.load.knowledge.agency-kiwi.x"; got != want {
		t.Errorf("Capability = %q, want %q", got, want)
	}
}

func TestMatch(t *testing.T) {
	fsWrite := ToolCapability("rye/file-system/fs_write")
	tests := []struct {
		name     string
		granted  []string
		required string
		want     bool
	}{
		{"nil grants fail closed", nil, fsWrite, false},
		{"empty grants fail closed", []string{}, fsWrite, false},
		{"exact", []string{fsWrite}, fsWrite, true},
		{"exact other", []string{ToolCapability("rye/file-system/fs_read")}, fsWrite, false},
		{"star grants all", []string{"*"}, fsWrite, true},
		{"trailing wildcard", []string{"rye.execute.tool.rye.file-system.*"}, fsWrite, true},
		{"wildcard with slashes", []string{"rye.execute.tool.rye/file-system/*"}, fsWrite, true},
		{"required with slashes", []string{fsWrite}, "rye.execute.tool.rye/file-system/fs_write", true},
		{"primary wildcard", []string{"rye.execute.*"}, fsWrite, true},
		{"wrong primary", []string{"rye.load.*"}, fsWrite, false},
		{"wildcard does not match its own prefix", []string{"rye.execute.tool.rye.file-system.*"}, "rye.execute.tool.rye.file-system", false},
		{"prefix is not a grant", []string{"rye.execute.tool.rye"}, fsWrite, false},
		{"empty required", []string{"*"}, "", false},
		{"spaces trimmed", []string{"  rye.execute.* "}, fsWrite, true},
		{"wildcard required covered by broader", []string{"rye.execute.*"}, "rye.execute.tool.*", true},
		{"wildcard required not covered by exact", []string{fsWrite}, "rye.execute.tool.*", false},
		{"fetch grants search", []string{"rye.fetch.knowledge.x.*"}, "rye.search.knowledge.x.y", true},
		{"fetch grants load", []string{"rye.fetch/knowledge/x/*"}, "rye.load.knowledge.x.y", true},
		{"fetch star grants search and load", []string{"rye.fetch.*"}, "rye.load.tool.a", true},
		{"fetch grants no execute", []string{"rye.fetch.*"}, fsWrite, false},
		{"fetch grants only its items", []string{"rye.fetch.knowledge.x.*"}, "rye.load.knowledge.z", false},
		{"required fetch needs search and load", []string{"rye.search.*"}, "rye.fetch.knowledge.x", false},
		{"required fetch by both", []string{"rye.search.*", "rye.load.knowledge.*"}, "rye.fetch.knowledge.x", true},
		{"a primary starting with fetch is not fetch", []string{"rye.fetcher.*"}, "rye.search.knowledge.x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Match(tt.granted, tt.required); got != tt.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tt.granted, tt.required, got, tt.want)
			}
		})
	}
}

func TestExpandFetch(t *testing.T) {
	for in, want := range map[string][]string{
		"rye.fetch.knowledge.x.*":  {"rye.search.knowledge.x.*", "rye.load.knowledge.x.*"},
		"rye.fetch/directive/a/b":  {"rye.search.directive.a.b", "rye.load.directive.a.b"},
		"rye.fetch.*":              {"rye.search.*", "rye.load.*"},
		"rye.fetch*":               {"rye.search*", "rye.load*"},
		"rye.execute.tool.fetch.x": {"rye.execute.tool.fetch.x"},
		"rye.fetcher.x":            {"rye.fetcher.x"},
		"*":                        {"*"},
	} {
		if diff := cmp.Diff(want, ExpandFetch(in)); diff != "" {
			t.Errorf("ExpandFetch(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestMatchUnder(t *testing.T) {
	const under = "rye.execute.tool.mcp.files."
	tests := []struct {
		granted []string
		want    bool
	}{
		{nil, false},
		{[]string{"*"}, true},
		{[]string{"rye.execute.*"}, true},
		{[]string{"rye.execute.tool.mcp.f*"}, true},
		{[]string{"rye.execute.tool.mcp.files.*"}, true},
		{[]string{"rye.execute.tool.mcp/files/read"}, true},
		{[]string{"rye.execute.tool.mcp.files.read.*"}, true},
		{[]string{"rye.execute.tool.mcp.other.*"}, false},
		{[]string{"rye.execute.tool.mcp.filesx.read"}, false},
		{[]string{"rye.execute.tool.mcp.files"}, false},
		{[]string{"rye.load.*"}, false},
		{[]string{""}, false},
	}
	for _, tt := range tests {
		if got := MatchUnder(tt.granted, under); got != tt.want {
			t.Errorf("MatchUnder(%q, %q) = %v, want %v", tt.granted, under, got, tt.want)
		}
	}
}

func TestIntersect(t *testing.T) {
	tests := []struct {
		name          string
		asked, parent []string
		want          []string
	}{
		{"parent holds nothing", []string{"*"}, nil, []string{}},
		{"child asks nothing", nil, []string{"*"}, []string{}},
		{"parent star keeps ask", []string{"rye.execute.tool.a.*", "rye.load.knowledge.x"}, []string{"*"}, []string{"rye.execute.tool.a.*", "rye.load.knowledge.x"}},
		{"child star narrowed to parent", []string{"*"}, []string{"rye.execute.tool.a.b", "rye.load.*"}, []string{"rye.execute.tool.a.b", "rye.load.*"}},
		{"child wildcard narrowed", []string{"rye.execute.*"}, []string{"rye.execute.tool.a.*", "rye.load.knowledge.k"}, []string{"rye.execute.tool.a.*"}},
		{"exact outside parent dropped", []string{"rye.execute.tool.b"}, []string{"rye.execute.tool.a.*"}, []string{}},
		{"slashes normalised", []string{"rye.execute.tool.a/b"}, []string{"rye.execute.tool.a.*"}, []string{"rye.execute.tool.a.b"}},
		{"dedupe", []string{"rye.execute.tool.a.b", "rye.execute.tool.a/b"}, []string{"*"}, []string{"rye.execute.tool.a.b"}},
		{"child fetch is its search and load", []string{"rye.fetch.knowledge.k.*"}, []string{"*"}, []string{"rye.search.knowledge.k.*", "rye.load.knowledge.k.*"}},
		{"parent fetch covers child load", []string{"rye.load.knowledge.k"}, []string{"rye.fetch.*"}, []string{"rye.load.knowledge.k"}},
		{"child fetch narrowed to parent search", []string{"rye.fetch.*"}, []string{"rye.search.knowledge.*"}, []string{"rye.search.knowledge.*"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Intersect(tt.asked, tt.parent)); diff != "" {
				t.Errorf("Intersect (-want +got):\n%s", diff)
			}
		})
	}
}

// randomCap builds capability patterns and concrete capabilities from a
// small alphabet so that random sets overlap often.
func randomCap(r *rand.Rand, wildcard bool) string {
	if wildcard && r.IntN(12) == 0 {
		return "*"
	}
	segs := []string{"rye"}
	prim := []string{"execute", "load", "search", "sign", "fetch"}
	types := []string{"tool", "directive", "knowledge"}
	ids := []string{"a", "b", "ab", "c"}
	n := 1 + r.IntN(5)
	for i := 0; i < n; i++ {
		switch i {
		case 0:
			segs = append(segs, prim[r.IntN(len(prim))])
		case 1:
			segs = append(segs, types[r.IntN(len(types))])
		default:
			segs = append(segs, ids[r.IntN(len(ids))])
		}
	}
	sep := "."
	if r.IntN(4) == 0 {
		sep = "/"
	}
	s := strings.Join(segs, sep)
	if wildcard && r.IntN(3) == 0 {
		switch r.IntN(3) {
		case 0:
			s += ".*"
		case 1:
			s += "*" // bare trailing star, prefix semantics
		default:
			s = s[:len(s)-1] + "*"
		}
	}
	return s
}

// TestIntersectProperty: for random parent and child sets, every concrete
// capability the child's effective set grants is granted by the parent (a
// child never gains what its parent lacks), and the effective set grants
// exactly what both the ask and the parent grant.
func TestIntersectProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 3000; iter++ {
		parent := make([]string, r.IntN(5))
		for i := range parent {
			parent[i] = randomCap(r, true)
		}
		child := make([]string, r.IntN(5))
		for i := range child {
			child[i] = randomCap(r, true)
		}
		eff := Intersect(child, parent)
		for probe := 0; probe < 60; probe++ {
			req := randomCap(r, false)
			got := Match(eff, req)
			if got && !Match(parent, req) {
				t.Fatalf("child %q parent %q: effective %q grants %q which the parent lacks", child, parent, eff, req)
			}
			if want := Match(child, req) && Match(parent, req); got != want {
				t.Fatalf("child %q parent %q: effective %q Match(%q) = %v, want %v", child, parent, eff, req, got, want)
			}
		}
		// Effective patterns themselves are covered by the parent.
		for _, e := range eff {
			if !Match(parent, e) {
				t.Fatalf("effective pattern %q not covered by parent %q", e, parent)
			}
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	granted := []string{"rye.execute.tool.rye.file-system.*", "rye.execute.tool.rye/agent/threads/thread_directive", "rye.load.knowledge.agency-kiwi.*"}
	req := ToolCapability("rye/agent/threads/thread_directive")
	for b.Loop() {
		if !Match(granted, req) {
			b.Fatal("no match")
		}
	}
}
