package graph

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/thread"
)

// Limits of one file's decoded size: YAML aliases can multiply a small
// file (a "billion laughs"), and deep nesting would exhaust the stack.
const (
	maxValueNodes = 100_000
	maxDepth      = 100
)

// reader walks a yaml.Node tree, turning values into JSON-like Go values
// (map[string]any, []any, string, int, float64, bool, nil) and recording
// what is wrong in r.
type reader struct {
	r        Report
	budget   int
	overflow bool
}

// kv is one key of a mapping.
type kv struct {
	key  string
	k, v *yaml.Node
}

func join(key, sub string) string {
	if key == "" {
		return sub
	}
	return key + "." + sub
}

func (p *reader) errorf(node, key string, n *yaml.Node, format string, a ...any) {
	p.r.Errors = append(p.r.Errors, Diagnostic{Node: node, Key: key, Message: fmt.Sprintf(format, a...), Line: line(n)})
}

func (p *reader) warnf(node, key string, n *yaml.Node, format string, a ...any) {
	p.r.Warnings = append(p.r.Warnings, Diagnostic{Node: node, Key: key, Message: fmt.Sprintf(format, a...), Line: line(n)})
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return resolve(n.Content[0])
	}
	return n
}

// isNull reports whether n is absent or a YAML null.
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// mapping returns n's keys in order, with merge keys (<<) expanded after
// the explicit keys (which win). A null n is an empty mapping with ok
// false; anything else that is not a mapping is an error.
func (p *reader) mapping(n *yaml.Node, node, key string) (pairs []kv, ok bool) {
	return p.mappingDepth(n, node, key, 0)
}

// mappingDepth is mapping for a mapping merged depth levels deep, which
// bounds chains of merge keys.
func (p *reader) mappingDepth(n *yaml.Node, node, key string, depth int) ([]kv, bool) {
	if isNull(n) {
		return nil, false
	}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(node, key, n, "must be a mapping, not %s", yamlKind(n))
		return nil, false
	}
	if depth > 10 {
		p.errorf(node, key, n, "merge keys nested too deeply")
		return nil, false
	}
	var out, merged []kv
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !p.spend(node, key, n) {
			return out, true
		}
		k, v := resolve(n.Content[i]), n.Content[i+1]
		switch {
		case k == nil || k.Kind != yaml.ScalarNode:
			p.errorf(node, key, n.Content[i], "a key must be text, not %s", yamlKind(k))
		case k.Value == "<<" && k.ShortTag() == "!!merge":
			merged = append(merged, p.merge(v, node, key, depth)...)
		case seen[k.Value]:
			p.errorf(node, join(key, k.Value), k, "duplicate key")
		default:
			seen[k.Value] = true
			out = append(out, kv{key: k.Value, k: k, v: v})
		}
	}
	for _, m := range merged {
		if !seen[m.key] {
			seen[m.key] = true
			out = append(out, m)
		}
	}
	return out, true
}

// merge reads the value v of a merge key (<<): one mapping or a list of
// them, whose pairs come in order, one level deeper.
func (p *reader) merge(v *yaml.Node, node, key string, depth int) []kv {
	vv := resolve(v)
	srcs := []*yaml.Node{vv}
	if vv != nil && vv.Kind == yaml.SequenceNode {
		srcs = vv.Content
	}
	var out []kv
	for _, s := range srcs {
		sub, _ := p.mappingDepth(s, node, key, depth+1)
		out = append(out, sub...)
	}
	return out
}

func yamlKind(n *yaml.Node) string {
	n = resolve(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean"
		case "!!int", "!!float":
			return "a number"
		}
		return "text"
	}
	return "nothing"
}

// spend counts one decoded node against the file's budget, reporting
// once when it runs out.
func (p *reader) spend(node, key string, n *yaml.Node) bool {
	p.budget--
	if p.budget >= 0 {
		return true
	}
	if !p.overflow {
		p.overflow = true
		p.errorf(node, key, n, "the file is too large once its aliases are expanded")
	}
	return false
}

// value decodes n as a JSON-like value.
func (p *reader) value(n *yaml.Node, node, key string) any {
	return p.valueDepth(n, node, key, 0)
}

func (p *reader) valueDepth(n *yaml.Node, node, key string, depth int) any {
	n = resolve(n)
	if n == nil {
		return nil
	}
	if !p.spend(node, key, n) {
		return nil
	}
	if depth > maxDepth {
		p.errorf(node, key, n, "nested more than %d levels deep", maxDepth)
		return nil
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return p.scalar(n, node, key)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			out = append(out, p.valueDepth(c, node, key, depth+1))
		}
		return out
	case yaml.MappingNode:
		pairs, _ := p.mappingDepth(n, node, key, 0)
		out := make(map[string]any, len(pairs))
		for _, e := range pairs {
			out[e.key] = p.valueDepth(e.v, node, join(key, e.key), depth+1)
		}
		return out
	}
	return nil
}

// scalar decodes a scalar by its tag; text for anything that is not null,
// a boolean or a number (timestamps stay as written).
func (p *reader) scalar(n *yaml.Node, node, key string) any {
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		if v, ok := intScalar(n); ok {
			return v
		}
	case "!!float":
		if v, ok := p.floatScalar(n, node, key); ok {
			return v
		}
	}
	return n.Value
}

// intScalar decodes an integer: an int when it fits, else a finite
// float64. It reports false when n does not decode as either.
func intScalar(n *yaml.Node) (any, bool) {
	var i int64
	if n.Decode(&i) == nil && int64(int(i)) == i {
		return int(i), true
	}
	var f float64
	if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return f, true
	}
	return nil, false
}

// floatScalar decodes a float: an int when it is whole and exact, since
// JSON does not tell 2.0 from 2. Infinities and NaN are errors (null);
// it reports false when n does not decode.
func (p *reader) floatScalar(n *yaml.Node, node, key string) (any, bool) {
	var f float64
	if n.Decode(&f) != nil {
		return nil, false
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		p.errorf(node, key, n, "%s is not a finite number (graph values must be JSON)", n.Value)
		return nil, true
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int(f), true
	}
	return f, true
}

// str decodes a scalar as text; null is "".
func (p *reader) str(n *yaml.Node, node, key string) string {
	if isNull(n) {
		return ""
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		p.errorf(node, key, n, "must be text, not %s", yamlKind(n))
		return ""
	}
	return n.Value
}

// strList decodes a list of text.
func (p *reader) strList(n *yaml.Node, node, key string) []string {
	if isNull(n) {
		return nil
	}
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf(node, key, n, "must be a list, not %s", yamlKind(n))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		if s := p.str(c, node, fmt.Sprintf("%s[%d]", key, i)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// boolean decodes true/false (also as text).
func (p *reader) boolean(n *yaml.Node, node, key string) bool {
	if isNull(n) {
		return false
	}
	b, ok := thread.Bool(p.value(n, node, key))
	if !ok {
		p.errorf(node, key, n, "must be true or false")
	}
	return b
}

// integer decodes a whole number (also as text).
func (p *reader) integer(n *yaml.Node, node, key string) int {
	if isNull(n) {
		return 0
	}
	v := p.value(n, node, key)
	f, err := thread.Number(v)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		p.errorf(node, key, n, "must be a whole number, not %s", shortText(v))
		return 0
	}
	return int(f)
}

// object decodes a mapping of values; nil when absent.
func (p *reader) object(n *yaml.Node, node, key string) map[string]any {
	if isNull(n) {
		return nil
	}
	if resolve(n).Kind != yaml.MappingNode {
		p.errorf(node, key, n, "must be a mapping, not %s", yamlKind(n))
		return nil
	}
	m, _ := p.value(n, node, key).(map[string]any)
	return m
}

// shortText renders v for a message.
func shortText(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(clip(x, 40))
	}
	return clip(text(v), 40)
}

// toFloat converts any Go number to float64.
func toFloat(v any) (float64, bool) {
	if _, ok := v.(string); ok {
		return 0, false
	}
	if _, ok := v.(bool); ok {
		return 0, false
	}
	f, err := thread.Number(v)
	return f, err == nil
}

// parseDuration reads a duration: Go syntax ("90s", "2m", "1h30m") or a number
// of seconds.
func parseDuration(v any) (time.Duration, error) {
	if x, ok := v.(string); ok {
		s := strings.TrimSpace(x)
		if d, err := time.ParseDuration(s); err == nil {
			if d <= 0 {
				return 0, fmt.Errorf("%q is not a positive duration", x)
			}
			return d, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return secondsDuration(f)
		}
		return 0, fmt.Errorf("%q is not a duration (write 90s, 2m, 1h30m or a number of seconds)", x)
	}
	f, ok := toFloat(v)
	if !ok {
		return 0, fmt.Errorf("%s is not a duration", shortText(v))
	}
	return secondsDuration(f)
}

func secondsDuration(f float64) (time.Duration, error) {
	if !(f > 0) || f > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("%g is not a positive number of seconds", f)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// duration decodes a duration field; 0 when absent.
func (p *reader) duration(n *yaml.Node, node, key string) time.Duration {
	if isNull(n) {
		return 0
	}
	d, err := parseDuration(p.value(n, node, key))
	if err != nil {
		p.errorf(node, key, n, "%v", err)
	}
	return d
}

// formatDuration writes d compactly: "90s" → "1m30s", "2m", "1h", "1.5s",
// "250ms". parseDuration reads it back exactly.
func formatDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
		d -= m * time.Minute
	}
	if d == 0 {
		return b.String()
	}
	if d%time.Second == 0 {
		fmt.Fprintf(&b, "%ds", d/time.Second)
		return b.String()
	}
	if d < time.Second && b.Len() == 0 {
		if d%time.Millisecond == 0 {
			return fmt.Sprintf("%dms", d/time.Millisecond)
		}
		return d.String()
	}
	b.WriteString(strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s")
	return b.String()
}
