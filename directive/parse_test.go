package directive

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

func ptr[T any](v T) *T { return &v }

func parseFile(t *testing.T, name string) *Directive {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	d, err := Parse(name, data)
	require.NoError(t, err, "Parse(%s)", name)
	return d
}

func TestParseDepthChild(t *testing.T) {
	d := parseFile(t, "depth_child.md")
	require.Equal(t, "depth_child", d.Name, "name/version = %q/%q", d.Name, d.Version)
	require.Equal(t, "1.0.0", d.Version, "name/version = %q", d.Name)
	require.True(t, strings.HasPrefix(d.Signature, "<!-- rye:signed:2026-02-17"), "Signature = %q", d.Signature)
	require.NotContains(t, d.Prompt, "rye:signed", "Prompt must be the file minus the signature line, starts %q", d.Prompt[:30])
	require.True(t, strings.HasPrefix(d.Prompt, "# Depth child"), "Prompt must be the file minus the signature line, starts %q", d.Prompt[:30])
	require.Contains(t, d.Prompt, "```xml\n<directive", "Prompt must keep the xml fence")
	require.Equal(t, "# Depth child\n\nWrites a marker file for its level, then tries to spawn a grandchild.", d.Body, "Body")
	require.Equal(t, "Writes a marker, then tries to spawn a grandchild.", d.Description, "metadata = %q %q %q", d.Description, d.Category, d.Author)
	require.Equal(t, "test/limits", d.Category, "metadata = %q %q %q", d.Description, d.Category, d.Author)
	require.Equal(t, "example", d.Author, "metadata = %q %q", d.Description, d.Category)
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
	require.True(t, thread.Match(d.Permissions, thread.ToolCapability("rye/file-system/fs_write")), "permission matching wrong for %q", d.Permissions)
	require.True(t, thread.Match(d.Permissions, thread.ToolCapability("rye/agent/threads/thread_directive")), "permission matching wrong for %q", d.Permissions)
	require.False(t, thread.Match(d.Permissions, thread.ToolCapability("rye/agent/threads/orchestrator")), "permission matching wrong for %q", d.Permissions)
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
	require.Empty(t, d.Hooks, "hooks %v continuation %q", d.Hooks, d.Continuation)
	require.Empty(t, d.Continuation, "hooks %v continuation", d.Hooks)
}

func TestParseFullDirective(t *testing.T) {
	d := parseFile(t, "implement_dashboard.md")
	require.Empty(t, d.Signature, "unsigned file has Signature")
	require.NotEmpty(t, d.Prompt, "Prompt")
	require.True(t, strings.HasPrefix(d.Prompt, "# Implement dashboard"), "Prompt = %q", d.Prompt)
	require.Equal(t, "Builds five dashboard views & wires them to the API.", d.Description, "Description")
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
	require.Equal(t, "agency-kiwi/dashboard_continuation", d.Continuation, "Continuation")
	types := map[string]string{}
	for _, in := range d.Inputs {
		types[in.Name] = in.Type
	}
	wantTypes := map[string]string{"api_thread_id": "string", "previous_summary_id": "string", "views": "integer", "ratio": "number", "dark": "boolean", "options": "object", "pages": "array"}
	if diff := cmp.Diff(wantTypes, types); diff != "" {
		t.Errorf("input types (-want +got):\n%s", diff)
	}
	in, _ := d.Input("views")
	require.NotNil(t, in.Default, "views input = %+v", in)
	require.Equal(t, "5", *in.Default, "views input = %+v", in)
	require.False(t, in.Required, "views input = %+v", in)
	require.Len(t, d.Process, 2, "Process")
	require.Equal(t, "Plan the {input:views} views.", d.Process[0].Description, "Process = %+v", d.Process)
	require.Len(t, d.Process[1].Actions, 2, "Process = %+v", d.Process)
	require.Equal(t, "views/{input:views}.tsx", d.Process[1].Actions[0].Params["path"], "Process = %+v", d.Process)
	require.Equal(t, "load", d.Process[1].Actions[1].Primary, "Process = %+v", d.Process)
	wantOut := Outputs{Fields: []OutputField{{Name: "views_dir", Required: true, Description: "Directory of the views."}, {Name: "notes", Description: "Anything worth knowing."}}}
	if diff := cmp.Diff(wantOut, d.Outputs); diff != "" {
		t.Errorf("Outputs (-want +got):\n%s", diff)
	}
	got := d.MissingOutputs(map[string]any{"notes": "x"})
	require.Equal(t, []string{"views_dir"}, got, "MissingOutputs")
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
			require.Equal(t, tt.declared, d.PermissionsDeclared, "PermissionsDeclared")
		})
	}
	// legacy file: permissions after metadata, model id attribute, free-text outputs
	d := parseFile(t, "legacy_caps.md")
	require.Equal(t, "claude-3-5-haiku-20241022", d.Model.ID, "legacy: model %+v outputs %+v", d.Model, d.Outputs)
	require.Equal(t, "Return the number of leads found.", d.Outputs.Text, "legacy: model %+v outputs %+v", d.Model, d.Outputs)
	// fail closed
	d = parseFile(t, "no_permissions.md")
	require.False(t, thread.Match(d.Permissions, thread.ToolCapability("rye/file-system/fs_read")), "no permissions must grant nothing")
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
			require.Equal(t, []string{"rye.execute.tool.a.b"}, d.Permissions)
		}},
		{"cap star", wrap("<permissions><cap>*</cap></permissions>"), func(t *testing.T, d *Directive) {
			require.Equal(t, []string{"*"}, d.Permissions)
		}},
		{"permissions inside and after metadata merge", wrap("<metadata><permissions><load><knowledge>k</knowledge></load></permissions></metadata><permissions><search>*</search></permissions>"), func(t *testing.T, d *Directive) {
			require.Equal(t, []string{"rye.load.knowledge.k", "rye.search.*"}, d.Permissions)
		}},
		{"fetch star grants search and load", wrap("<metadata><permissions><fetch>*</fetch></permissions></metadata>"), func(t *testing.T, d *Directive) {
			require.Equal(t, []string{"rye.search.*", "rye.load.*"}, d.Permissions)
		}},
		{"fetch of items", wrap("<permissions><fetch><knowledge>graphs/*</knowledge><directive>*</directive><tool>rye/x</tool></fetch></permissions>"), func(t *testing.T, d *Directive) {
			require.Equal(t, []string{"rye.search.knowledge.graphs.*", "rye.load.knowledge.graphs.*", "rye.search.directive.*", "rye.load.directive.*",
				"rye.search.tool.rye.x", "rye.load.tool.rye.x"}, d.Permissions)
			require.True(t, thread.Match(d.Permissions, thread.Capability(thread.PrimaryLoad, "knowledge", "graphs/a")))
			require.True(t, thread.Match(d.Permissions, thread.Capability(thread.PrimarySearch, "knowledge", "graphs/a")))
			require.False(t, thread.Match(d.Permissions, thread.Capability(thread.PrimaryLoad, "knowledge", "other")))
		}},
		{"legacy fetch cap", wrap("<permissions><cap>rye.fetch.knowledge.k</cap></permissions>"), func(t *testing.T, d *Directive) {
			require.Equal(t, []string{"rye.search.knowledge.k", "rye.load.knowledge.k"}, d.Permissions)
		}},
		{"duration_seconds is duration", wrap(`<metadata><limits turns="10" duration_seconds="1"/></metadata>`), func(t *testing.T, d *Directive) {
			require.Equal(t, thread.Limits{Turns: ptr(10), Duration: ptr(1.0)}, d.Limits)
		}},
		{"the reference's own elements", wrap(`<metadata><context><system>s</system><before>k</before></context><context_budget><step_count>3</step_count></context_budget><relationships><suggests>x</suggests></relationships><model tier="fast" provider="zen"/></metadata><context><tech_stack>go</tech_stack></context><success_criteria><criterion>c</criterion></success_criteria>`), func(t *testing.T, d *Directive) {
			require.Equal(t, "fast", d.Model.Tier)
		}},
		{"tool star", wrap("<permissions><execute><tool>*</tool></execute></permissions>"), func(t *testing.T, d *Directive) {
			require.Equal(t, []string{"rye.execute.tool.*"}, d.Permissions)
		}},
		{"limits in the max_ spelling", wrap(`<metadata><limits max_turns="15" max_tokens="200000" max_spend="0.5" max_depth="2" max_spawns="3" max_duration="60"/></metadata>`), func(t *testing.T, d *Directive) {
			if diff := cmp.Diff(thread.Limits{Turns: ptr(15), Tokens: ptr(200000), Spend: ptr(0.5), Depth: ptr(2), Spawns: ptr(3), Duration: ptr(60.0)}, d.Limits); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
		}},
		{"limits only some", wrap(`<metadata><limits spawns="0" duration="12.5"/></metadata>`), func(t *testing.T, d *Directive) {
			if diff := cmp.Diff(thread.Limits{Spawns: ptr(0), Duration: ptr(12.5)}, d.Limits); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}},
		{"model text id", wrap(`<metadata><model>claude-x</model></metadata>`), func(t *testing.T, d *Directive) {
			require.Equal(t, "claude-x", d.Model.ID, "got %+v", d.Model)
		}},
		{"model text describes", wrap(`<metadata><model tier="haiku">Multi-tool research and report generation</model></metadata>`), func(t *testing.T, d *Directive) {
			require.Equal(t, Model{Tier: "haiku"}, d.Model, "a description is not a model id")
		}},
		{"continuation text", wrap(`<metadata><continuation>a/b</continuation></metadata>`), func(t *testing.T, d *Directive) {
			require.Equal(t, "a/b", d.Continuation)
		}},
		{"hooks outside metadata", wrap(`<hooks><hook id="h" event="error"><action primary="fail"><param name="code" value="x"/></action></hook></hooks>`), func(t *testing.T, d *Directive) {
			if len(d.Hooks) != 1 || d.Hooks[0].Action.Params["code"] != "x" || d.Hooks[0].Layer != hooks.LayerDirective {
				t.Errorf("got %+v", d.Hooks)
			}
		}},
		{"hook without id gets one", wrap(`<hooks><hook event="after_step"><action primary="load" item_type="knowledge" item_id="k"/></hook></hooks>`), func(t *testing.T, d *Directive) {
			require.Len(t, d.Hooks, 1)
			require.Equal(t, "t_hook_1", d.Hooks[0].ID, "got %+v", d.Hooks)
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
			require.Equal(t, "a & b < c \u00a0d", d.Description)
		}},
		{"other fences before the directive are skipped", "```xml\n<note/>\n```\n" + wrap(""), func(t *testing.T, d *Directive) {
			require.Equal(t, "t", d.Name, "got %q body %q", d.Name, d.Body)
			require.Equal(t, "```xml\n<note/>\n```", d.Body, "got %q body", d.Name)
		}},
		{"crlf line endings", strings.ReplaceAll("<!-- rye:signed:x -->\n"+wrap(`<metadata><limits turns="2"/></metadata>`), "\n", "\r\n"), func(t *testing.T, d *Directive) {
			require.Equal(t, "<!-- rye:signed:x -->", d.Signature, "got sig %q limits %+v", d.Signature, d.Limits)
			require.NotNil(t, d.Limits.Turns, "got sig %q limits %+v", d.Signature, d.Limits)
			require.Equal(t, 2, *d.Limits.Turns, "got sig %q limits %+v", d.Signature, d.Limits)
			require.NotContains(t, d.Prompt, "signed", "got sig %q limits %+v", d.Signature, d.Limits)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Parse("t.md", []byte(tt.src))
			require.NoError(t, err)
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
		{"max_turns not a number", wrap(`<metadata><limits max_turns="six"/></metadata>`), `t.md:3: <limits max_turns="six">: not a number`},
		{"turns not a whole number", wrap(`<metadata><limits turns="2.5"/></metadata>`), `t.md:3: <limits turns="2.5">: not a whole number`},
		{"negative depth", wrap(`<metadata><limits depth="-1"/></metadata>`), `t.md:3: <limits depth="-1">: negative`},
		{"NaN spend", wrap(`<metadata><limits spend="NaN"/></metadata>`), `t.md:3: <limits spend="NaN">: not a number`},
		{"spawns too large", wrap(`<metadata><limits spawns="1e12"/></metadata>`), `t.md:3: <limits spawns="1e12">: too large`},
		{"unknown permission", wrap(`<permissions><delete>*</delete></permissions>`), "t.md:3: unknown element <delete> in <permissions> (expected <cap>, <execute>, <fetch>, <load>, <search> or <sign>)"},
		{"unknown item type", wrap(`<permissions><execute><widget>x</widget></execute></permissions>`), "t.md:3: unknown element <widget> in <execute> (expected <directive>, <graph>, <knowledge> or <tool>)"},
		// What a misspelling would change without a word: the default
		// limits, no capabilities, no hook, no declared output.
		{"misspelt limits", wrap("<metadata>\n  <description>d</description>\n  <limts spend=\"0.05\"/>\n</metadata>"), "t.md:5: unknown element <limts> in <metadata> (did you mean <limits>?)"},
		{"misspelt permissions", wrap("<metadata>\n<permisions><execute>*</execute></permisions>\n</metadata>"), "t.md:4: unknown element <permisions> in <metadata> (did you mean <permissions>?)"},
		{"misspelt permissions after metadata", wrap("<metadata/>\n<permisions><execute>*</execute></permisions>"), "t.md:4: unknown element <permisions> in <directive> (did you mean <permissions>?)"},
		{"misspelt primary", wrap(`<permissions><exeucte><tool>x</tool></exeucte></permissions>`), "t.md:3: unknown element <exeucte> in <permissions> (did you mean <execute>?)"},
		{"misspelt item type", wrap(`<permissions><execute><tools>x</tools></execute></permissions>`), "t.md:3: unknown element <tools> in <execute> (did you mean <tool>?)"},
		{"misspelt limit attribute", wrap(`<metadata><limits turns="3" spnd="0.05"/></metadata>`), "t.md:3: unknown attribute spnd on <limits> (did you mean spend?)"},
		{"unknown limit attribute", wrap(`<metadata><limits budget="0.05"/></metadata>`), "t.md:3: unknown attribute budget on <limits> (expected "},
		{"misspelt model attribute", wrap(`<metadata><model teir="fast"/></metadata>`), "t.md:3: unknown attribute teir on <model> (did you mean tier?)"},
		{"misspelt directive attribute", "```xml\n<directive name=\"t\" verison=\"1.0.0\"/>\n```\n", "t.md:2: unknown attribute verison on <directive> (did you mean version?)"},
		{"misspelt hooks", wrap(`<metadata><hook id="h" event="error"><action primary="fail"/></hook></metadata>`), "t.md:3: unknown element <hook> in <metadata> (did you mean <hooks>?)"},
		{"misspelt hook child", wrap(`<hooks><hook id="h" event="error"><acton primary="fail"/></hook></hooks>`), "t.md:3: unknown element <acton> in <hook> (did you mean <action>?)"},
		{"misspelt inputs", wrap(`<input><input name="x"/></input>`), "t.md:3: unknown element <input> in <directive> (did you mean <inputs>?)"},
		{"misspelt input attribute", wrap(`<inputs><input name="x" requird="true"/></inputs>`), "t.md:3: unknown attribute requird on <input> (did you mean required?)"},
		{"misspelt output", wrap(`<outputs><ouput name="x" required="true">x</ouput></outputs>`), "t.md:3: unknown element <ouput> in <outputs> (did you mean <output>?)"},
		{"misspelt outputs", wrap(`<ouputs><output name="x"/></ouputs>`), "t.md:3: unknown element <ouputs> in <directive> (did you mean <outputs>?)"},
		{"attribute on a text-only element", wrap(`<permissions><cap kind="x">rye.execute.*</cap></permissions>`), "t.md:3: unknown attribute kind on <cap> (it takes none)"},
		{"element in a text-only element", wrap(`<metadata><limits turns="2"><x/></limits></metadata>`), "t.md:3: unknown element <x> in <limits> (it holds text only)"},
		{"misspelt step", wrap(`<process><stpe name="a"/></process>`), "t.md:3: unknown element <stpe> in <process> (did you mean <step>?)"},
		{"empty item id", wrap(`<permissions><execute><tool> </tool></execute></permissions>`), "t.md:3: <execute><tool>: empty item id"},
		{"bad permissions text", wrap(`<permissions>all</permissions>`), `t.md:3: <permissions>: text "all"`},
		{"capability string as text", wrap(`<permissions>rye.execute.tool.rye.file-system.*</permissions>`),
			`t.md:3: <permissions>: text "rye.execute.tool.rye.file-system.*": expected "*" or child elements (a capability string goes in <cap>: <cap>rye.execute.tool.rye.file-system.*</cap>)`},
		{"item id as text", wrap(`<permissions><execute>rye/file-system/*</execute></permissions>`),
			`t.md:3: <execute>: text "rye/file-system/*": expected "*" or <tool>, <directive>, <graph> or <knowledge> (an item goes in an element of its type: <tool>rye/file-system/*</tool>)`},
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
		{"model not closed swallows the rest", wrap("<metadata>\n<model tier=\"s\">\n<limits turns=\"2\"/>\n<permissions><execute>*</execute></permissions>\n</metadata>"),
			`t.md:4: <model>: element is not closed before </metadata> on line 7`},
		{"end tag names another element", wrap("<metadata><description>d</metadata></description>"), "t.md:3: <description>: element is not closed"},
		{"continuation empty", wrap(`<metadata><continuation/></metadata>`), "t.md:3: <continuation>: missing directive name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.md", []byte(tt.src))
			require.Error(t, err, "Parse succeeded, want error %q", tt.want)
			require.True(t, strings.HasPrefix(err.Error(), tt.want), "error = %q\nwant prefix %q", err, tt.want)
			require.NotContains(t, err.Error(), "\n", "error is not one line: %q", err)
		})
	}
}

func TestParseErrorNamesFileLineElement(t *testing.T) {
	p := filepath.Join("testdata", "bad", "depth_child.md")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	_, err = Parse("depth_child.md", data)
	got, want := errString(err), `depth_child.md:14: <limits spend="abc">: not a number`
	require.Equal(t, want, got, "error")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
