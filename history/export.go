package history

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/thread"
)

// Script is a recording as a scripted-provider script (CLI.md "The
// scripted provider").
type Script struct {
	// YAML is the script.
	YAML []byte
	// Turns and Threads count what it holds.
	Turns, Threads int
	// Warnings say what the script cannot tell apart: threads of one
	// directive, chain index and inputs whose recorded turns differ (the
	// script guards them by thread id, which only a replay keeps).
	Warnings []string
}

type scriptFile struct {
	ContextWindow int                       `yaml:"context_window,omitempty"`
	Price         *scriptPrice              `yaml:"price,omitempty"`
	Directives    map[string][]scriptTurnFn `yaml:"directives"`
}

type scriptPrice struct {
	Input  float64 `yaml:"input_per_mtok"`
	Output float64 `yaml:"output_per_mtok"`
}

type scriptTurnFn struct {
	Text      string       `yaml:"text,omitempty"`
	ToolCalls []scriptCall `yaml:"tool_calls,omitempty"`
	Usage     scriptUsage  `yaml:"usage"`
	When      string       `yaml:"when,omitempty"`
}

type scriptCall struct {
	Tool  string `yaml:"tool"`
	Input any    `yaml:"input"`
}

type scriptUsage struct {
	Input  int `yaml:"input"`
	Output int `yaml:"output"`
}

// Export writes the recording t (Load) as a script for the scripted
// provider: one entry per recorded model turn, with its text, its tool
// calls and their inputs as recorded, and its usage (cache tokens count
// as input), under the thread's directive; children's directives too.
//
//   - Text that looks like a template action ("{{") is escaped, so the
//     script plays it as it was recorded.
//   - Thread ids in inputs and text are written as the template values
//     the scripted provider gives a thread: its own id {{.thread_id}},
//     its parent's {{.parent_id}}, the thread it continues
//     {{.previous_thread_id}}, and the children its conversation has
//     shown started {{index .children N}}, so the script runs as a
//     fixture where the ids are new.
//   - Several threads of one directive are told apart by `when` guards
//     on their chain index and inputs (threads whose turns are the same
//     share one list); threads that those do not tell apart are guarded
//     by their id, which only a replay keeps (Script.Warnings).
//   - context_window and price are those of the first thread's model
//     (for a script, its own), so that handoffs and spend happen as they
//     did.
func Export(ctx context.Context, o *orchestrator.Orchestrator, t *Thread) (*Script, error) {
	out := &Script{}
	f := scriptFile{Directives: map[string][]scriptTurnFn{}}
	exportModel(ctx, o, t, &f)
	order, byDirective, err := groupTurns(t, out)
	if err != nil {
		return nil, err
	}
	for _, d := range order {
		f.Directives[d] = directiveTurns(d, byDirective[d], out)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# spool thread export-script %s: %s of %s, as recorded\n", t.ID(), thread.Count(out.Turns, "model turn", "model turns"),
		thread.Count(out.Threads, "thread", "threads"))
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	out.YAML = buf.Bytes()
	// The script must load as the provider reads it.
	if _, err := provider.ParseScript("export of "+t.ID(), out.YAML); err != nil {
		return nil, fmt.Errorf("export %s: the script does not load: %w", t.ID(), err)
	}
	return out, nil
}

// exportModel sets f's context_window and price to those of the model of
// t's first thread, as its bundle's pricing gives them. A bundle or model
// that cannot be loaded leaves them unset: the script then plays with the
// scripted provider's own.
func exportModel(ctx context.Context, o *orchestrator.Orchestrator, t *Thread, f *scriptFile) {
	proj, err := o.Project(ctx, t.Record.Bundle)
	if err != nil {
		return
	}
	cfg := provider.ConfigFromEnv().ForBundle(proj.Pricing, proj.ReadFile)
	p, err := provider.New(t.Record.Model, cfg)
	if err != nil {
		return
	}
	f.ContextWindow = p.ContextWindow(t.Record.Model)
	in, err1 := p.Cost(t.Record.Model, provider.Usage{InputTokens: 1_000_000})
	outp, err2 := p.Cost(t.Record.Model, provider.Usage{OutputTokens: 1_000_000})
	if err1 == nil && err2 == nil && (in > 0 || outp > 0) {
		f.Price = &scriptPrice{Input: in, Output: outp}
	}
}

// turnGroup is the turns of one recorded thread that has any, with what
// tells it apart from the other threads of its directive.
type turnGroup struct {
	key   string // chain index + inputs
	id    string
	turns []scriptTurnFn
	index int
	input string
}

// groupTurns walks t's threads and groups their exported turns by
// directive, in the order the directives are first met. A thread whose
// chain index, inputs and turns are those of one already grouped adds
// nothing: one list plays both. It counts every thread and turn in out.
func groupTurns(t *Thread, out *Script) ([]string, map[string][]*turnGroup, error) {
	byDirective := map[string][]*turnGroup{}
	var order []string
	var err error
	t.Walk(func(th *Thread) {
		if err != nil {
			return
		}
		var turns []scriptTurnFn
		if turns, err = exportTurns(th); err != nil {
			return
		}
		out.Threads++
		out.Turns += len(turns)
		if len(turns) == 0 {
			return
		}
		r := th.Record
		in, _ := json.Marshal(r.Inputs) // as the provider's toJSON renders .inputs
		g := &turnGroup{key: strconv.Itoa(r.ChainIndex) + " " + string(in), id: r.ThreadID, turns: turns, index: r.ChainIndex, input: string(in)}
		d := r.Directive
		if _, ok := byDirective[d]; !ok {
			order = append(order, d)
		}
		for _, o := range byDirective[d] {
			if o.key == g.key && equalTurns(o.turns, g.turns) {
				return // the same turns again: one list plays both
			}
		}
		byDirective[d] = append(byDirective[d], g)
	})
	if err != nil {
		return nil, nil, err
	}
	return order, byDirective, nil
}

// directiveTurns is the script's list for directive d of groups gs. One
// group plays as it is; several are each guarded by a `when` on their
// chain index and inputs, or, where another group shares those, by their
// thread id, which out.Warnings says only a replay keeps.
func directiveTurns(d string, gs []*turnGroup, out *Script) []scriptTurnFn {
	if len(gs) == 1 {
		return gs[0].turns
	}
	keys := map[string]int{}
	for _, g := range gs {
		keys[g.key]++
	}
	var list []scriptTurnFn
	for _, g := range gs {
		when := fmt.Sprintf("{{and (eq .chain_index %d) (eq (toJSON .inputs) %s)}}", g.index, strconv.Quote(g.input))
		if keys[g.key] > 1 {
			when = fmt.Sprintf("{{eq .thread_id %s}}", strconv.Quote(g.id))
			out.Warnings = append(out.Warnings, fmt.Sprintf("directive %s: thread %s has the chain index and inputs of another thread of it but other turns: its turns are guarded by its id, which only a replay keeps", d, g.id))
		}
		for _, tn := range g.turns {
			tn.When = when
			list = append(list, tn)
		}
	}
	return list
}

func equalTurns(a, b []scriptTurnFn) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// exportTurns is th's recorded turns as script entries.
func exportTurns(th *Thread) ([]scriptTurnFn, error) {
	r := th.Record
	var out []scriptTurnFn
	for i, tn := range th.Turns {
		ids := idTemplates(r.ThreadID, r.ParentID, r.PreviousThreadID, th.children[i])
		e := scriptTurnFn{Text: templated(tn.Out.Content, ids),
			Usage: scriptUsage{Input: tn.Out.Usage.InputTokens + tn.Out.Usage.CacheReadTokens + tn.Out.Usage.CacheWriteTokens, Output: tn.Out.Usage.OutputTokens}}
		for _, c := range tn.Out.ToolCalls {
			var in any = map[string]any{}
			if len(c.Input) > 0 && string(c.Input) != "null" {
				if err := json.Unmarshal(c.Input, &in); err != nil {
					return nil, fmt.Errorf("%s turn %d: tool call %s: input: %w", r.ThreadID, tn.N, c.ID, err)
				}
			}
			if _, ok := in.(map[string]any); !ok {
				// The scripted provider takes a mapping; a model that
				// sent another JSON value is replayed under "input".
				in = map[string]any{"input": in}
			}
			e.ToolCalls = append(e.ToolCalls, scriptCall{Tool: templated(c.Name, nil), Input: hooks.MapStrings(in, func(s string) string { return templated(s, ids) })})
		}
		out = append(out, e)
	}
	return out, nil
}

// idTemplate is a thread id and the template that renders it.
type idTemplate struct{ id, tmpl string }

// idTemplates are the ids a thread's turn may mention, longest first.
func idTemplates(self, parent, previous string, children []string) []idTemplate {
	var ids []idTemplate
	add := func(id, tmpl string) {
		if id != "" && !slices.ContainsFunc(ids, func(t idTemplate) bool { return t.id == id }) {
			ids = append(ids, idTemplate{id, tmpl})
		}
	}
	add(self, "{{.thread_id}}")
	add(parent, "{{.parent_id}}")
	add(previous, "{{.previous_thread_id}}")
	for i, c := range children {
		add(c, fmt.Sprintf("{{index .children %d}}", i))
	}
	sort.SliceStable(ids, func(i, j int) bool { return len(ids[i].id) > len(ids[j].id) })
	return ids
}

// templated escapes s for the scripted provider's templates and writes
// the ids in it as their templates.
func templated(s string, ids []idTemplate) string {
	if !strings.Contains(s, "{{") && !containsAny(s, ids) {
		return s
	}
	// Split on the ids first, so that their templates are not escaped.
	parts := []string{s}
	for _, id := range ids {
		var next []string
		for i, p := range parts {
			if i%2 == 1 { // an id's template already
				next = append(next, p)
				continue
			}
			pieces := strings.Split(p, id.id)
			for j, piece := range pieces {
				if j > 0 {
					next = append(next, id.tmpl)
				}
				next = append(next, piece)
			}
		}
		parts = next
	}
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString(p)
		} else {
			b.WriteString(strings.ReplaceAll(p, "{{", `{{"{{"}}`))
		}
	}
	return b.String()
}

func containsAny(s string, ids []idTemplate) bool {
	for _, id := range ids {
		if strings.Contains(s, id.id) {
			return true
		}
	}
	return false
}
