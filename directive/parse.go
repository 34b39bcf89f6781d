package directive

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

// SignaturePrefix starts a directive's optional signature line.
const SignaturePrefix = "<!-- rye:signed:"

// Input types.
const (
	TypeString  = "string"
	TypeInteger = "integer"
	TypeNumber  = "number"
	TypeBoolean = "boolean"
	TypeObject  = "object"
	TypeArray   = "array"
)

var typeAliases = map[string]string{
	"": TypeString, "string": TypeString, "str": TypeString, "text": TypeString,
	"integer": TypeInteger, "int": TypeInteger,
	"number": TypeNumber, "float": TypeNumber,
	"boolean": TypeBoolean, "bool": TypeBoolean,
	"object": TypeObject, "dict": TypeObject, "map": TypeObject,
	"array": TypeArray, "list": TypeArray,
}

// Parse parses a directive file. path names the file in errors; errors are
// *ParseError naming the file, line and element.
func Parse(path string, data []byte) (*Directive, error) {
	text := string(data)
	d := &Directive{Path: path, Prompt: text}

	// Signature line.
	first, rest, hasNL := strings.Cut(text, "\n")
	if sig := strings.TrimSpace(strings.TrimSuffix(first, "\r")); strings.HasPrefix(sig, SignaturePrefix) && strings.HasSuffix(sig, "-->") {
		d.Signature = sig
		if hasNL {
			d.Prompt = rest
		} else {
			d.Prompt = ""
		}
	}

	// The xml fence holding <directive>.
	lines := strings.Split(text, "\n")
	start, end := -1, -1 // 0-based line indexes of the fence lines
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(strings.TrimSuffix(lines[i], "\r"))
		if !isXMLFence(l) {
			continue
		}
		j := i + 1
		for ; j < len(lines); j++ {
			if strings.TrimSpace(strings.TrimSuffix(lines[j], "\r")) == "```" {
				break
			}
		}
		if j == len(lines) {
			return nil, &ParseError{Path: path, Line: i + 1, Msg: "```xml fence is not closed"}
		}
		if strings.Contains(strings.Join(lines[i+1:j], "\n"), "<directive") {
			start, end = i, j
			break
		}
		i = j
	}
	if start < 0 {
		return nil, &ParseError{Path: path, Line: 0, Msg: "no ```xml fence with a <directive> element"}
	}
	bodyStart := 0
	if d.Signature != "" {
		bodyStart = 1
	}
	if start > bodyStart {
		d.Body = strings.TrimSpace(strings.Join(lines[bodyStart:start], "\n"))
	}

	root, err := parseXML(path, []byte(strings.Join(lines[start+1:end], "\n")), start+2)
	if err != nil {
		return nil, err
	}
	p := &parser{path: path, d: d}
	if err := p.directive(root); err != nil {
		return nil, err
	}
	return d, nil
}

func isXMLFence(l string) bool {
	rest, ok := strings.CutPrefix(l, "```")
	if !ok {
		return false
	}
	rest = strings.TrimSpace(rest)
	return rest == "xml" || strings.HasPrefix(rest, "xml ")
}

type parser struct {
	path string
	d    *Directive
	seen map[string]bool // permissions already added
}

func (p *parser) errf(n *node, elem, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.line
	}
	return &ParseError{Path: p.path, Line: line, Elem: elem, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) directive(root *node) error {
	if root.name != "directive" {
		return p.errf(root, root.tag(), "the xml fence must hold a <directive> element")
	}
	d := p.d
	d.Name = root.str("name")
	d.Version = root.str("version")
	if d.Name == "" {
		return p.errf(root, root.tag(), "missing name attribute")
	}
	if err := checkKnown(p.path, root); err != nil {
		return err
	}
	seenMeta := false
	for _, c := range root.children {
		var err error
		switch c.name {
		case "metadata":
			if seenMeta {
				return p.errf(c, c.tag(), "more than one <metadata>")
			}
			seenMeta = true
			err = p.metadata(c)
		case "permissions", "cap":
			err = p.permissionsOrCap(c)
		case "hooks":
			err = p.hooks(c)
		case "model", "limits":
			err = p.metaChild(c) // tolerated outside <metadata>
		case "inputs":
			err = p.inputs(c)
		case "process":
			err = p.process(c)
		case "outputs":
			err = p.outputs(c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) metadata(m *node) error {
	for _, c := range m.children {
		if err := p.metaChild(c); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) metaChild(c *node) error {
	d := p.d
	switch c.name {
	case "description":
		d.Description = c.allText()
	case "category":
		d.Category = c.content()
	case "author":
		d.Author = c.content()
	case "model":
		d.Model = Model{Tier: c.str("tier"), ID: c.str("id"), Fallback: c.str("fallback"), FallbackID: c.str("fallback_id")}
		// <model>claude-x</model> names the model by its text; a text
		// with spaces describes it (the reference writes <model
		// tier="haiku">Multi-tool research</model>), and the tier stands.
		if text := c.content(); d.Model.ID == "" && !strings.ContainsAny(text, " \t\r\n") {
			d.Model.ID = text
		}
	case "limits":
		return p.limits(c)
	case "permissions", "cap":
		return p.permissionsOrCap(c)
	case "hooks":
		return p.hooks(c)
	case "continuation":
		d.Continuation = c.str("directive")
		if d.Continuation == "" {
			d.Continuation = c.content()
		}
		if d.Continuation == "" {
			return p.errf(c, c.tag(), "missing directive name")
		}
	}
	return nil
}

func (p *parser) limits(c *node) error {
	for _, a := range c.attrs {
		// One rule for limits, whoever writes them (thread.Limits.SetLimit).
		err := p.d.Limits.SetLimit(limitAttr(a.Name.Local), a.Value)
		var bad *thread.LimitValueError
		switch {
		case errors.As(err, &bad) && bad.Reason == "unknown limit":
			// Other attributes are not limits: ignored, as before.
		case errors.As(err, &bad):
			return p.errf(c, fmt.Sprintf("<limits %s=%q>", a.Name.Local, a.Value), "%s", bad.Reason)
		case err != nil:
			return err
		}
	}
	return nil
}

// limitAttr is the limit a <limits> attribute sets: the reference's
// directives also write max_turns="6" max_tokens="4096" (its earlier
// spelling, still in many of them) for turns and tokens, and so on for
// every limit, and duration_seconds for duration.
func limitAttr(name string) string {
	if rest, ok := strings.CutPrefix(name, "max_"); ok && slices.Contains(thread.LimitNames, rest) {
		return rest
	}
	if name == "duration_seconds" {
		return "duration"
	}
	return name
}

// permissionPrimaries are the primaries <permissions> holds: <fetch> is
// the reference's later primary that merged search and load, and grants
// both (thread.ExpandFetch).
var permissionPrimaries = map[string]bool{
	thread.PrimaryExecute: true, thread.PrimarySearch: true, thread.PrimaryLoad: true, thread.PrimarySign: true,
	thread.PrimaryFetch: true,
}

// permissionItemTypes are the items a permission names; <graph> names
// the graphs a thread may start (rye/agent/graphs/run_graph).
var permissionItemTypes = map[string]bool{"tool": true, "directive": true, "knowledge": true, "graph": true}

func (p *parser) addPermission(c string) {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	for _, c := range thread.ExpandFetch(c) {
		if !p.seen[c] {
			p.seen[c] = true
			p.d.Permissions = append(p.d.Permissions, c)
		}
	}
}

// permissionsOrCap reads <permissions> (or a <cap> standing in for it):
// "*" for every capability, or its children, each a <cap> or a primary
// (permission). Reading one declares the permissions, even none.
func (p *parser) permissionsOrCap(c *node) error {
	p.d.PermissionsDeclared = true
	if p.d.Permissions == nil {
		p.d.Permissions = []string{}
	}
	if c.name == "cap" {
		return p.capElem(c)
	}
	if len(c.children) == 0 {
		all, err := p.wildcard(c, "child elements")
		if all {
			p.addPermission("*")
		}
		return err
	}
	for _, g := range c.children {
		if err := p.permission(g); err != nil {
			return err
		}
	}
	return nil
}

// permission reads one child g of <permissions>: a <cap>, or a primary
// (<execute>, <search>, <load>, <sign>, <fetch>) holding "*" for all of
// its capabilities or the items it grants.
func (p *parser) permission(g *node) error {
	if g.name == "cap" {
		return p.capElem(g)
	}
	if !permissionPrimaries[g.name] {
		return p.errf(g, g.tag(), "unknown permission; expected <execute>, <search>, <load>, <sign>, <fetch> or <cap>")
	}
	if len(g.children) == 0 {
		all, err := p.wildcard(g, "<tool>, <directive>, <graph> or <knowledge>")
		if all {
			p.addPermission(thread.CapabilityPrefix + g.name + ".*")
		}
		return err
	}
	for _, it := range g.children {
		if err := p.permissionItem(g, it); err != nil {
			return err
		}
	}
	return nil
}

// wildcard reads the text of c, an element without children: "*" (all
// is true: every capability c may grant) or nothing. Any other text is an
// error saying what c may hold instead (expected).
func (p *parser) wildcard(c *node, expected string) (all bool, err error) {
	switch t := c.content(); t {
	case "":
		return false, nil
	case "*":
		return true, nil
	default:
		return false, p.errf(c, c.tag(), "text %q: expected \"*\" or %s%s", t, expected, wrapHint(c, t))
	}
}

// wrapHint suggests the element that text t written straight into c
// belongs in: a capability string in <cap>, an item id in <tool>.
func wrapHint(c *node, t string) string {
	if strings.ContainsAny(t, " \t\n<>") {
		return ""
	}
	if c.name == "permissions" && strings.HasPrefix(t, "rye.") {
		return fmt.Sprintf(" (a capability string goes in <cap>: <cap>%s</cap>)", t)
	}
	if c.name == "execute" && strings.Contains(t, "/") {
		return fmt.Sprintf(" (an item goes in an element of its type: <tool>%s</tool>)", t)
	}
	return ""
}

// permissionItem reads the item it of the primary g
// (<execute><tool>rye/bash</tool></execute>): a known item type, and an id
// that is neither empty nor holds spaces.
func (p *parser) permissionItem(g, it *node) error {
	if !permissionItemTypes[it.name] {
		return p.errf(it, "<"+g.name+"><"+it.name+">", "unknown item type; expected <tool>, <directive>, <graph> or <knowledge>")
	}
	id := it.content()
	if id == "" {
		return p.errf(it, "<"+g.name+"><"+it.name+">", "empty item id")
	}
	if strings.ContainsAny(id, " \t\n") {
		return p.errf(it, "<"+g.name+"><"+it.name+">", "item id %q contains spaces", id)
	}
	p.addPermission(thread.Capability(g.name, it.name, id))
	return nil
}

func (p *parser) capElem(c *node) error {
	t := c.content()
	switch {
	case t == "":
		return p.errf(c, "<cap>", "empty capability")
	case strings.ContainsAny(t, " \t\n"):
		return p.errf(c, "<cap>", "capability %q contains spaces", t)
	case t != "*" && !strings.HasPrefix(thread.NormalizeCapability(t), thread.CapabilityPrefix):
		return p.errf(c, "<cap>", "capability %q does not start with %q", t, thread.CapabilityPrefix)
	}
	p.addPermission(t)
	return nil
}

// hooks reads the <hook> children of <hooks>, in order.
func (p *parser) hooks(c *node) error {
	for _, h := range c.children {
		if h.name != "hook" {
			continue
		}
		hk, err := p.hook(h)
		if err != nil {
			return err
		}
		p.d.Hooks = append(p.d.Hooks, hk)
	}
	return nil
}

// hook reads one <hook>: its id (by default the directive's name and the
// hook's number), its event, and its <condition>, <action> (required) and
// <description>. The hook must be valid (hooks.Hook.Validate).
func (p *parser) hook(h *node) (hooks.Hook, error) {
	hk := hooks.Hook{ID: h.str("id"), Event: h.str("event"), Layer: hooks.LayerDirective}
	if hk.ID == "" {
		hk.ID = fmt.Sprintf("%s_hook_%d", p.d.Name, len(p.d.Hooks)+1)
	}
	seenAction := false
	for _, x := range h.children {
		var err error
		switch x.name {
		case "condition":
			hk.Condition, err = p.condition(x)
		case "action":
			seenAction = true
			hk.Action, err = p.action(x)
		case "description":
			hk.Description = x.allText()
		}
		if err != nil {
			return hk, err
		}
	}
	if !seenAction {
		return hk, p.errf(h, h.tag("id"), "missing <action>")
	}
	if err := hk.Validate(); err != nil {
		return hk, p.errf(h, h.tag("id"), "%v", err)
	}
	return hk, nil
}

// action reads a hook's <action>: the item it acts with (primary,
// item_type, item_id) and its <param>s.
func (p *parser) action(x *node) (hooks.Action, error) {
	a := hooks.Action{Primary: x.str("primary"), ItemType: x.str("item_type"), ItemID: x.str("item_id")}
	params, err := p.params(x)
	if err != nil {
		return a, err
	}
	if len(params) > 0 {
		a.Params = make(map[string]any, len(params))
		for k, v := range params {
			a.Params[k] = v
		}
	}
	return a, nil
}

func (p *parser) condition(c *node) (*hooks.Condition, error) {
	cond := &hooks.Condition{Path: c.str("path"), Op: c.str("op")}
	if v, ok := c.attr("value"); ok {
		cond.Value = v
	} else if cond.Op != "" && c.content() != "" {
		cond.Value = c.content()
	}
	for _, x := range c.children {
		var subs []*hooks.Condition
		for _, y := range x.children {
			if y.name != "condition" {
				return nil, p.errf(y, y.tag(), "expected <condition> inside <%s>", x.name)
			}
			s, err := p.condition(y)
			if err != nil {
				return nil, err
			}
			subs = append(subs, s)
		}
		switch x.name {
		case "any":
			cond.Any = append(cond.Any, subs...)
		case "all":
			cond.All = append(cond.All, subs...)
		case "not":
			if len(subs) != 1 {
				return nil, p.errf(x, "<not>", "must hold exactly one <condition>")
			}
			cond.Not = subs[0]
		case "condition": // a bare nested condition is an all-of
			s, err := p.condition(x)
			if err != nil {
				return nil, err
			}
			cond.All = append(cond.All, s)
		default:
			return nil, p.errf(x, x.tag(), "unknown condition element; expected <any>, <all>, <not> or <condition>")
		}
	}
	if err := cond.Validate(); err != nil {
		return nil, p.errf(c, c.tag("path"), "%v", err)
	}
	return cond, nil
}

// params reads <param name="x" value="y"/> and <param name="x">y</param>.
func (p *parser) params(c *node) (map[string]string, error) {
	var out map[string]string
	for _, x := range c.children {
		if x.name != "param" {
			continue
		}
		name := x.str("name")
		if name == "" {
			return nil, p.errf(x, "<param>", "missing name attribute")
		}
		v, ok := x.attr("value")
		if !ok {
			v = x.content()
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = v
	}
	return out, nil
}

func (p *parser) inputs(c *node) error {
	for _, x := range c.children {
		if x.name != "input" {
			continue
		}
		in := Input{Name: x.str("name"), Description: x.allText()}
		if in.Name == "" {
			return p.errf(x, "<input>", "missing name attribute")
		}
		t, ok := typeAliases[strings.ToLower(x.str("type"))]
		if !ok {
			return p.errf(x, fmt.Sprintf("<input name=%q type=%q>", in.Name, x.str("type")), "unknown type; expected string, integer, number, boolean, object or array")
		}
		in.Type = t
		if r, ok := x.attr("required"); ok {
			b, err := parseBoolAttr(r)
			if err != nil {
				return p.errf(x, fmt.Sprintf("<input name=%q required=%q>", in.Name, r), "not a boolean")
			}
			in.Required = b
		}
		if dv, ok := x.attr("default"); ok {
			in.Default = &dv
		}
		if _, dup := p.d.Input(in.Name); dup {
			return p.errf(x, fmt.Sprintf("<input name=%q>", in.Name), "declared twice")
		}
		p.d.Inputs = append(p.d.Inputs, in)
	}
	return nil
}

func parseBoolAttr(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "yes", "1":
		return true, nil
	case "false", "no", "0", "":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean")
}

func (p *parser) process(c *node) error {
	for _, x := range c.children {
		if x.name != "step" {
			continue
		}
		st := Step{Name: x.str("name")}
		for _, y := range x.children {
			switch y.name {
			case "description":
				st.Description = y.allText()
			case "execute", "load", "search":
				params, err := p.params(y)
				if err != nil {
					return err
				}
				st.Actions = append(st.Actions, StepAction{Primary: y.name, ItemType: y.str("item_type"), ItemID: y.str("item_id"), Params: params})
			}
		}
		if st.Description == "" {
			st.Description = x.content()
		}
		p.d.Process = append(p.d.Process, st)
	}
	return nil
}

func (p *parser) outputs(c *node) error {
	o := &p.d.Outputs
	o.Text = c.content()
	for _, x := range c.children {
		switch x.name {
		case "output":
			f := OutputField{Name: x.str("name"), Description: x.allText()}
			if f.Name == "" {
				return p.errf(x, "<output>", "missing name attribute")
			}
			if r, ok := x.attr("required"); ok {
				b, err := parseBoolAttr(r)
				if err != nil {
					return p.errf(x, fmt.Sprintf("<output name=%q required=%q>", f.Name, r), "not a boolean")
				}
				f.Required = b
			}
			o.Fields = append(o.Fields, f)
		case "success":
			o.Success = x.allText()
		case "failure":
			o.Failure = x.allText()
		default:
			if t := x.allText(); t != "" {
				if o.Text != "" {
					o.Text += "\n"
				}
				o.Text += t
			}
		}
	}
	return nil
}
