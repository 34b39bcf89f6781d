package directive

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/thread"
)

// The elements and attributes a directive may hold. A misspelt one would
// otherwise be skipped without a word and change the run (a <limts> runs
// with the default limits, a <permisions> with no capabilities), so Parse
// refuses any element or attribute that is neither read by spool nor
// written by the reference system's own directives (which spool reads
// unchanged), naming its line and the nearest known name. Prose elements
// (descriptions, input and output documentation, the reference's
// <context> and <success_criteria>) hold what they like.

// elemSpec is what one element may hold.
type elemSpec struct {
	attrs []string
	// children by element name; anyChildren: not checked (prose).
	children    map[string]*elemSpec
	anyChildren bool
	// anyAttrs: attributes are not checked.
	anyAttrs bool
	// textChildren: an element not in children is free text when it
	// carries no attribute (<outputs> holds <result>, <child_thread_id>
	// ... as its description).
	textChildren bool
}

// prose holds any text and markup.
var prose = &elemSpec{anyChildren: true, anyAttrs: true}

// leaf holds text only.
var leaf = &elemSpec{}

var (
	paramSpec = &elemSpec{attrs: []string{"name", "value"}}

	permissionItem = leaf
	permissionSpec = &elemSpec{children: map[string]*elemSpec{
		"tool": permissionItem, "directive": permissionItem, "knowledge": permissionItem, "graph": permissionItem,
	}}
	permissionsSpec = &elemSpec{children: map[string]*elemSpec{
		thread.PrimaryExecute: permissionSpec, thread.PrimarySearch: permissionSpec, thread.PrimaryLoad: permissionSpec,
		thread.PrimarySign: permissionSpec, thread.PrimaryFetch: permissionSpec, "cap": leaf,
	}}

	conditionSpec = &elemSpec{attrs: []string{"path", "op", "value"}}
	hooksSpec     = &elemSpec{children: map[string]*elemSpec{"hook": {
		attrs: []string{"id", "event"},
		children: map[string]*elemSpec{
			"condition":   conditionSpec,
			"action":      {attrs: []string{"primary", "item_type", "item_id"}, children: map[string]*elemSpec{"param": paramSpec}},
			"description": prose,
		},
	}}}

	modelSpec  = &elemSpec{attrs: []string{"tier", "id", "fallback", "fallback_id", "provider"}}
	limitsSpec = &elemSpec{attrs: limitAttrs()}

	metadataSpec = &elemSpec{children: map[string]*elemSpec{
		"description": prose, "category": prose, "author": prose,
		"model": modelSpec, "limits": limitsSpec, "permissions": permissionsSpec, "cap": leaf, "hooks": hooksSpec,
		"continuation": {attrs: []string{"directive"}},
		// The reference's own, which spool does not read.
		"context": prose, "context_budget": prose, "relationships": prose, "name": prose, "version": prose,
	}}

	stepActionSpec = &elemSpec{attrs: []string{"item_type", "item_id", "query"}, children: map[string]*elemSpec{"param": paramSpec}}
	stepSpec       = &elemSpec{attrs: []string{"name"}, children: map[string]*elemSpec{
		"description": prose,
		"execute":     stepActionSpec, "load": stepActionSpec, "search": stepActionSpec, "sign": stepActionSpec, "fetch": stepActionSpec,
		"action": prose, "verification": prose,
	}}

	directiveSpec = &elemSpec{
		attrs: []string{"name", "version", "extends"},
		children: map[string]*elemSpec{
			"metadata": metadataSpec, "permissions": permissionsSpec, "cap": leaf, "hooks": hooksSpec,
			"model": modelSpec, "limits": limitsSpec,
			"inputs": {children: map[string]*elemSpec{"input": {
				attrs: []string{"name", "type", "required", "default"}, anyChildren: true}}},
			"process": {children: map[string]*elemSpec{"step": stepSpec}},
			"outputs": {textChildren: true, children: map[string]*elemSpec{
				"output":  {attrs: []string{"name", "required", "type"}, anyChildren: true},
				"success": prose, "failure": prose,
			}},
			// The reference's own, which spool does not read.
			"context": prose, "success_criteria": prose, "steps": prose,
		},
	}
)

func init() {
	// A condition nests: <any>, <all>, <not> hold conditions, and a bare
	// nested <condition> is an all-of.
	group := &elemSpec{children: map[string]*elemSpec{"condition": conditionSpec}}
	conditionSpec.children = map[string]*elemSpec{"any": group, "all": group, "not": group, "condition": conditionSpec}
}

// limitAttrs are the attributes <limits> takes: each limit, its max_
// spelling, and duration_seconds (limitAttr).
func limitAttrs() []string {
	out := slices.Clone(thread.LimitNames)
	for _, n := range thread.LimitNames {
		out = append(out, "max_"+n)
	}
	return append(out, "duration_seconds")
}

// checkKnown refuses the first element or attribute under root (in
// document order) that its parent does not know.
func checkKnown(path string, root *node) error {
	return checkNode(path, root, directiveSpec)
}

func checkNode(path string, n *node, spec *elemSpec) error {
	if !spec.anyAttrs {
		for _, a := range n.attrs {
			if a.Name.Space != "" || a.Name.Local == "xmlns" || slices.Contains(spec.attrs, a.Name.Local) {
				continue
			}
			msg := fmt.Sprintf("unknown attribute %s on <%s>", a.Name.Local, n.name)
			if len(spec.attrs) == 0 {
				msg += " (it takes none)"
			} else {
				msg += " (" + suggest(a.Name.Local, spec.attrs, "%s") + ")"
			}
			return &ParseError{Path: path, Line: n.line, Msg: msg}
		}
	}
	if spec.anyChildren {
		return nil
	}
	for _, c := range n.children {
		cs, ok := spec.children[c.name]
		if !ok {
			if spec.textChildren && len(c.attrs) == 0 {
				continue
			}
			names := make([]string, 0, len(spec.children))
			for k := range spec.children {
				names = append(names, k)
			}
			msg := fmt.Sprintf("unknown element <%s> in <%s>", c.name, n.name)
			if len(names) == 0 {
				msg += " (it holds text only)"
			} else {
				msg += " (" + suggest(c.name, names, "<%s>") + ")"
			}
			return &ParseError{Path: path, Line: c.line, Msg: msg}
		}
		if err := checkNode(path, c, cs); err != nil {
			return err
		}
	}
	return nil
}

// suggest names the known name nearest to name ("did you mean <limits>?")
// when one is a likely misspelling of it, else lists the known names
// ("expected <a>, <b> or <c>"); format renders one name.
func suggest(name string, known []string, format string) string {
	best, bestD := "", -1
	for _, k := range known {
		d := spelling.Distance(strings.ToLower(name), strings.ToLower(k))
		if bestD < 0 || d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	if bestD >= 0 && bestD <= max(1, min(3, len(best)/3)) {
		return "did you mean " + fmt.Sprintf(format, best) + "?"
	}
	sorted := slices.Clone(known)
	sort.Strings(sorted)
	for i, k := range sorted {
		sorted[i] = fmt.Sprintf(format, k)
	}
	if len(sorted) == 1 {
		return "expected " + sorted[0]
	}
	return "expected " + strings.Join(sorted[:len(sorted)-1], ", ") + " or " + sorted[len(sorted)-1]
}
