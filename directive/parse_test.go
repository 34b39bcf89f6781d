package directive

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

func ptr[T any](v T) *T { return &v }

func parseFile(t *testing.T, name string) *Directive {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(name, data)
	if err != nil {
		t.Fatalf("Parse(%s): %v", name, err)
	}
	return d
}

func TestParseDepthChild(t *testing.T) {
	d := parseFile(t, "depth_child.md")
	if d.Name != "depth_child" || d.Version != "1.0.0" {
		t.Errorf("name/version = %q/%q", d.Name, d.Version)
	}
	if !strings.HasPrefix(d.Signature, "<!-- rye:signed:2026-02-17") {
		t.Errorf("Signature = %q", d.Signature)
	}
	if strings.Contains(d.Prompt, "rye:signed") || !strings.HasPrefix(d.Prompt, "# Depth child") {
		t.Errorf("Prompt must be the file minus the signature line, starts %q", d.Prompt[:30])
	}
	if !strings.Contains(d.Prompt, "```xml\n<directive") {
		t.Errorf("Prompt must keep the xml fence")
	}
	if d.Body != "# Depth child\n\nWrites a marker file for its level, then tries to spawn a grandchild." {
		t.Errorf("Body = %q", d.Body)
	}
	if d.Description != "Writes a marker, then tries to spawn a grandchild." || d.Category != "test/limits" || d.Author != "example" {
		t.Errorf("metadata = %q %q %q", d.Description, d.Category, d.Author)
	}
	if diff := cmp.Diff(Model{Tier: "haiku"}, d.Model); diff != "" {
		t.Errorf("Model (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(thread.Limits{Turns: ptr(6), Tokens: ptr(4096), Spend: ptr(0.25)}, d.Limits); diff != "" {
		t.Errorf("Limits (-want +got):\n%s", diff)
	}
	wantPerms := []string{"rye.execute.tool.rye.file-system.*", "rye.execute.tool.rye.agent.threads.thread_directive"}
	if diff := cmp.Diff(wantPerms, d.Permissions); diff != "" || !d.PermissionsDeclared {
		t.Errorf("Permissions (-want +got):\n%s declared=%v", diff, d.PermissionsDeclared)
	}
	if !thread.Match(d.Permissions, thread.ToolCapability("rye/file-system/fs_write")) ||
		!thread.Match(d.Permissions, thread.ToolCapability("rye/agent/threads/thread_directive")) ||
		thread.Match(d.Permissions, thread.ToolCapability("rye/agent/threads/orchestrator")) {
		t.Errorf("permission matching wrong for %q", d.Permissions)
	}
	wantInputs := []Input{{Name: "level", Type: TypeString, Required: true, Description: "Nesting level."}}
	if diff := cmp.Diff(wantInputs, d.Inputs); diff != "" {
		t.Errorf("Inputs (-want +got):\n%s", diff)
	}
	wantProcess := []Step{{Name: "write_marker", Actions: []StepAction{{
		Primary: "execute", ItemType: "tool", ItemID: "rye/file-system/fs_write",
		Params: map[string]string{"path": "depth_child_{input:level}.txt", "content": "level {input:level}"},
	}}}}
	if diff := cmp.Diff(wantProcess, d.Process); diff != "" {
		t.Errorf("Process (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Outputs{Success: "Marker written."}, d.Outputs); diff != "" {
		t.Errorf("Outputs (-want +got):\n%s", diff)
	}
	if len(d.Hooks) != 0 || d.Continuation != "" {
		t.Errorf("hooks %v continuation %q", d.Hooks, d.Continuation)
	}
}

func TestParseFullDirective(t *testing.T) {
	d := parseFile(t, "implement_dashboard.md")
	if d.Signature != "" {
		t.Errorf("unsigned file has Signature %q", d.Signature)
	}
	if d.Prompt == "" || !strings.HasPrefix(d.Prompt, "# Implement dashboard") {
		t.Errorf("Prompt = %q", d.Prompt)
	}
	if d.Description != "Builds five dashboard views & wires them to the API." {
		t.Errorf("Description = %q", d.Description)
	}
	if diff := cmp.Diff(Model{Tier: "general", ID: "claude-sonnet-4-5", Fallback: "fast", FallbackID: "claude-haiku-4-5"}, d.Model); diff != "" {
		t.Errorf("Model (-want +got):\n%s", diff)
	}
	wantLimits := thread.Limits{Turns: ptr(40), Tokens: ptr(200000), Spend: ptr(2.5), Depth: ptr(3), Spawns: ptr(4), Duration: ptr(1800.0)}
	if diff := cmp.Diff(wantLimits, d.Limits); diff != "" {
		t.Errorf("Limits (-want +got):\n%s", diff)
	}
	wantPerms := []string{
		"rye.execute.tool.rye.file-system.fs_write",
		"rye.execute.tool.rye.agent.threads.thread_summary",
		"rye.execute.directive.agency-kiwi.*",
		"rye.load.knowledge.agent.threads.*",
		"rye.search.knowledge.*",
		"rye.sign.*",
	}
	if diff := cmp.Diff(wantPerms, d.Permissions); diff != "" {
		t.Errorf("Permissions (-want +got):\n%s", diff)
	}
	wantHooks := []hooks.Hook{
		{ID: "inject_api_schema", Event: "thread_started", Layer: 1,
			Action: hooks.Action{Primary: "execute", ItemType: "knowledge", ItemID: "agent/threads/${inputs.api_thread_id}"}},
		{ID: "summarize_on_complete", Event: "after_complete", Layer: 1,
			Condition: &hooks.Condition{Path: "cost.turns", Op: "gte", Value: "1"},
			Action: hooks.Action{Primary: "execute", ItemType: "tool", ItemID: "rye/agent/threads/thread_summary",
				Params: map[string]any{"thread_id": "${thread_id}"}}},
		{ID: "reinject_summary", Event: "thread_continued", Layer: 1, Description: "Summary of what was built before the handoff",
			Action: hooks.Action{Primary: "execute", ItemType: "knowledge", ItemID: "agent/threads/${inputs.previous_summary_id}"}},
		{ID: "escalate_spend", Event: "limit", Layer: 1,
			Condition: &hooks.Condition{
				Any: []*hooks.Condition{
					{Path: "limit_code", Op: "eq", Value: "spend_exceeded"},
					{Path: "limit_code", Op: "in", Value: "turns_exceeded, tokens_exceeded"},
				},
				Not: &hooks.Condition{Path: "directive", Op: "regex", Value: "^test/"},
			},
			Action: hooks.Action{Primary: "continue"}},
	}
	if diff := cmp.Diff(wantHooks, d.Hooks, cmpopts.IgnoreUnexported(hooks.Hook{})); diff != "" {
		t.Errorf("Hooks (-want +got):\n%s", diff)
	}
	if d.Continuation != "agency-kiwi/dashboard_continuation" {
		t.Errorf("Continuation = %q", d.Continuation)
	}
	types := map[string]string{}
	for _, in := range d.Inputs {
		types[in.Name] = in.Type
	}
	wantTypes := map[string]string{"api_thread_id": "string", "previous_summary_id": "string", "views": "integer", "ratio": "number", "dark": "boolean", "options": "object", "pages": "array"}
	if diff := cmp.Diff(wantTypes, types); diff != "" {
		t.Errorf("input types (-want +got):\n%s", diff)
	}
	if in, _ := d.Input("views"); in.Default == nil || *in.Default != "5" || in.Required {
		t.Errorf("views input = %+v", in)
	}
	if len(d.Process) != 2 || d.Process[0].Description != "Plan the {input:views} views." ||
		len(d.Process[1].Actions) != 2 || d.Process[1].Actions[0].Params["path"] != "views/{input:views}.tsx" ||
		d.Process[1].Actions[1].Primary != "load" {
		t.Errorf("Process = %+v", d.Process)
	}
	wantOut := Outputs{Fields: []OutputField{{Name: "views_dir", Required: true, Description: "Directory of the views."}, {Name: "notes", Description: "Anything worth knowing."}}}
	if diff := cmp.Diff(wantOut, d.Outputs); diff != "" {
		t.Errorf("Outputs (-want +got):\n%s", diff)
	}
	if got := d.MissingOutputs(map[string]any{"notes": "x"}); !cmp.Equal(got, []string{"views_dir"}) {
		t.Errorf("MissingOutputs = %v", got)
	}
}

func TestParsePermissionSpellings(t *testing.T) {
	tests := []struct {
		file     string
		want     []string
		declared bool
	}{
		{"legacy_caps.md", []string{"rye.execute.tool.scraping.gmaps.scrape_gmaps", "rye.load.knowledge.agency-kiwi.*"}, true},
		{"no_permissions.md", nil, false},
		{"empty_permissions.md", []string{}, true},
		{"star_permissions.md", []string{"*"}, true},
		{"execute_star.md", []string{"rye.execute.*", "rye.load.knowledge.project.conventions"}, true},
		{"depth_child.md", []string{"rye.execute.tool.rye.file-system.*", "rye.execute.tool.rye.agent.threads.thread_directive"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			d := parseFile(t, tt.file)
			if diff := cmp.Diff(tt.want, d.Permissions); diff != "" {
				t.Errorf("Permissions (-want +got):\n%s", diff)
			}
			if d.PermissionsDeclared != tt.declared {
				t.Errorf("PermissionsDeclared = %v, want %v", d.PermissionsDeclared, tt.declared)
			}
		})
	}
	// legacy file: permissions after metadata, model id attribute, free-text outputs
	d := parseFile(t, "legacy_caps.md")
	if d.Model.ID != "claude-3-5-haiku-20241022" || d.Outputs.Text != "Return the number of leads found." {
		t.Errorf("legacy: model %+v outputs %+v", d.Model, d.Outputs)
	}
	// fail closed
	if d := parseFile(t, "no_permissions.md"); thread.Match(d.Permissions, thread.ToolCapability("rye/file-system/fs_read")) {
		t.Error("no permissions must grant nothing")
	}
}

// wrap puts an xml body in a minimal directive file; the <directive> line
// is line 2.
func wrap(inner string) string {
	return "```xml\n<directive name=\"t\" version=\"1.0.0\">\n" + inner + "\n</directive>\n```\n"
}

func TestParseElements(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, d *Directive)
	}{
		{"cap inside metadata", wrap("<metadata><cap>rye/execute/tool/a/b</cap></metadata>"), func(t *testing.T, d *Directive) {
			if !cmp.Equal(d.Permissions, []string{"rye.execute.tool.a.b"}) {
				t.Errorf("got %q", d.Permissions)
			}
		}},
		{"cap star", wrap("<permissions><cap>*</cap></permissions>"), func(t *testing.T, d *Directive) {
			if !cmp.Equal(d.Permissions, []string{"*"}) {
				t.Errorf("got %q", d.Permissions)
			}
		}},
		{"permissions inside and after metadata merge", wrap("<metadata><permissions><load><knowledge>k</knowledge></load></permissions></metadata><permissions><search>*</search></permissions>"), func(t *testing.T, d *Directive) {
			if !cmp.Equal(d.Permissions, []string{"rye.load.knowledge.k", "rye.search.*"}) {
				t.Errorf("got %q", d.Permissions)
			}
		}},
		{"tool star", wrap("<permissions><execute><tool>*</tool></execute></permissions>"), func(t *testing.T, d *Directive) {
			if !cmp.Equal(d.Permissions, []string{"rye.execute.tool.*"}) {
				t.Errorf("got %q", d.Permissions)
			}
		}},
		{"limits only some", wrap(`<metadata><limits spawns="0" duration="12.5"/></metadata>`), func(t *testing.T, d *Directive) {
			if diff := cmp.Diff(thread.Limits{Spawns: ptr(0), Duration: ptr(12.5)}, d.Limits); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}},
		{"model text id", wrap(`<metadata><model>claude-x</model></metadata>`), func(t *testing.T, d *Directive) {
			if d.Model.ID != "claude-x" {
				t.Errorf("got %+v", d.Model)
			}
		}},
		{"continuation text", wrap(`<metadata><continuation>a/b</continuation></metadata>`), func(t *testing.T, d *Directive) {
			if d.Continuation != "a/b" {
				t.Errorf("got %q", d.Continuation)
			}
		}},
		{"hooks outside metadata", wrap(`<hooks><hook id="h" event="error"><action primary="fail"><param name="code" value="x"/></action></hook></hooks>`), func(t *testing.T, d *Directive) {
			if len(d.Hooks) != 1 || d.Hooks[0].Action.Params["code"] != "x" || d.Hooks[0].Layer != hooks.LayerDirective {
				t.Errorf("got %+v", d.Hooks)
			}
		}},
		{"hook without id gets one", wrap(`<hooks><hook event="after_step"><action primary="load" item_type="knowledge" item_id="k"/></hook></hooks>`), func(t *testing.T, d *Directive) {
			if len(d.Hooks) != 1 || d.Hooks[0].ID != "t_hook_1" {
				t.Errorf("got %+v", d.Hooks)
			}
		}},
		{"input type aliases and required spellings", wrap(`<inputs><input name="a" type="int" required="yes"/><input name="b" type="list" required="0"/><input name="c"/></inputs>`), func(t *testing.T, d *Directive) {
			want := []Input{{Name: "a", Type: TypeInteger, Required: true}, {Name: "b", Type: TypeArray}, {Name: "c", Type: TypeString}}
			if diff := cmp.Diff(want, d.Inputs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}},
		{"outputs mixed text", wrap(`<outputs>Summary first.<success>ok</success><failure>bad</failure><notes>n</notes></outputs>`), func(t *testing.T, d *Directive) {
			want := Outputs{Text: "Summary first.\nn", Success: "ok", Failure: "bad"}
			if diff := cmp.Diff(want, d.Outputs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}},
		{"bare ampersand and entities tolerated", wrap(`<metadata><description>a & b &lt; c &nbsp;d</description></metadata>`), func(t *testing.T, d *Directive) {
			if d.Description != "a & b < c \u00a0d" {
				t.Errorf("got %q", d.Description)
			}
		}},
		{"other fences before the directive are skipped", "```xml\n<note/>\n```\n" + wrap(""), func(t *testing.T, d *Directive) {
			if d.Name != "t" || d.Body != "```xml\n<note/>\n```" {
				t.Errorf("got %q body %q", d.Name, d.Body)
			}
		}},
		{"crlf line endings", strings.ReplaceAll("<!-- rye:signed:x -->\n"+wrap(`<metadata><limits turns="2"/></metadata>`), "\n", "\r\n"), func(t *testing.T, d *Directive) {
			if d.Signature != "<!-- rye:signed:x -->" || d.Limits.Turns == nil || *d.Limits.Turns != 2 || strings.Contains(d.Prompt, "signed") {
				t.Errorf("got sig %q limits %+v", d.Signature, d.Limits)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse("t.md", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, d)
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"no fence", "# just markdown\n", "t.md: no ```xml fence with a <directive> element"},
		{"unclosed fence", "```xml\n<directive name=\"t\">\n", "t.md:1: ```xml fence is not closed"},
		{"wrong root", "```xml\n<directive-ish/>\n```\n", "t.md:2: <directive-ish>: the xml fence must hold a <directive> element"},
		{"missing name", "```xml\n<directive version=\"1\"/>\n```\n", "t.md:2: <directive>: missing name attribute"},
		{"spend not a number", wrap(`<metadata>` + "\n" + `<limits spend="abc"/></metadata>`), `t.md:4: <limits spend="abc">: not a number`},
		{"turns not a whole number", wrap(`<metadata><limits turns="2.5"/></metadata>`), `t.md:3: <limits turns="2.5">: not a whole number`},
		{"negative depth", wrap(`<metadata><limits depth="-1"/></metadata>`), `t.md:3: <limits depth="-1">: negative`},
		{"NaN spend", wrap(`<metadata><limits spend="NaN"/></metadata>`), `t.md:3: <limits spend="NaN">: not a number`},
		{"spawns too large", wrap(`<metadata><limits spawns="1e12"/></metadata>`), `t.md:3: <limits spawns="1e12">: too large`},
		{"unknown permission", wrap(`<permissions><delete>*</delete></permissions>`), "t.md:3: <delete>: unknown permission"},
		{"unknown item type", wrap(`<permissions><execute><widget>x</widget></execute></permissions>`), "t.md:3: <execute><widget>: unknown item type"},
		{"empty item id", wrap(`<permissions><execute><tool> </tool></execute></permissions>`), "t.md:3: <execute><tool>: empty item id"},
		{"bad permissions text", wrap(`<permissions>all</permissions>`), `t.md:3: <permissions>: text "all"`},
		{"cap not rye", wrap(`<permissions><cap>execute.tool.x</cap></permissions>`), `t.md:3: <cap>: capability "execute.tool.x" does not start with "rye."`},
		{"input without name", wrap(`<inputs><input type="string"/></inputs>`), "t.md:3: <input>: missing name attribute"},
		{"input bad type", wrap(`<inputs><input name="x" type="date"/></inputs>`), `t.md:3: <input name="x" type="date">: unknown type`},
		{"input bad required", wrap(`<inputs><input name="x" required="maybe"/></inputs>`), `t.md:3: <input name="x" required="maybe">: not a boolean`},
		{"input twice", wrap(`<inputs><input name="x"/><input name="x"/></inputs>`), `t.md:3: <input name="x">: declared twice`},
		{"output without name", wrap(`<outputs><output/></outputs>`), "t.md:3: <output>: missing name attribute"},
		{"hook without action", wrap(`<hooks><hook id="h" event="error"/></hooks>`), `t.md:3: <hook id="h">: missing <action>`},
		{"hook unknown event", wrap(`<hooks><hook id="h" event="boom"><action primary="fail"/></hook></hooks>`), `t.md:3: <hook id="h">: hook "h": unknown event "boom"`},
		{"hook bad op", wrap(`<hooks><hook id="h" event="error"><condition path="x" op="like" value="y"/><action primary="fail"/></hook></hooks>`), `t.md:3: <condition path="x">: path "x": unknown op "like"`},
		{"hook bad regex", wrap(`<hooks><hook id="h" event="error"><condition path="x" op="regex" value="(("/><action primary="fail"/></hook></hooks>`), `t.md:3: <condition path="x">: x regex "(("`},
		{"not with two", wrap(`<hooks><hook id="h" event="error"><condition><not><condition path="a" op="exists"/><condition path="b" op="exists"/></not></condition><action primary="fail"/></hook></hooks>`), "t.md:3: <not>: must hold exactly one <condition>"},
		{"param without name", wrap(`<hooks><hook id="h" event="error"><action primary="fail"><param value="1"/></action></hook></hooks>`), "t.md:3: <param>: missing name attribute"},
		{"two roots", "```xml\n<directive name=\"a\"/>\n<directive name=\"b\"/>\n```\n", "t.md:3: <directive>: a second root element"},
		{"two metadata", wrap("<metadata/>\n<metadata/>"), "t.md:4: <metadata>: more than one <metadata>"},
		{"xml syntax", wrap("<metadata>\n<limits turns=\"6\" <x/></metadata>"), "t.md:4: xml: "},
		{"xml unterminated comment", wrap("<metadata><!-- oops</metadata>"), "t.md:"},
		{"continuation empty", wrap(`<metadata><continuation/></metadata>`), "t.md:3: <continuation>: missing directive name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.md", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded, want error %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error = %q\nwant prefix %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func TestParseErrorNamesFileLineElement(t *testing.T) {
	p := filepath.Join("testdata", "bad", "depth_child.md")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse("depth_child.md", data)
	if got, want := errString(err), `depth_child.md:14: <limits spend="abc">: not a number`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
