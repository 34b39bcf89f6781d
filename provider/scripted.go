package provider

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"
	"unicode/utf8"

	lru "github.com/hashicorp/golang-lru/v2"
	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/internal/yamlstrict"
	"github.com/spool-run/spool/thread"
)

// DefaultScriptContextWindow is a script's context window when it sets none.
const DefaultScriptContextWindow = 200000

// Scripted is the deterministic provider of CLI.md: it plays a YAML script
// instead of calling a model ("--model script:PATH").
//
// Selection is stateless, so a resumed or retried activation picks the same
// entry: for turn T (Request.Thread.Turn, or the number of assistant
// messages + 1 when 0) the provider finds the directive's entry list (exact
// key, else the first matching path.Match glob in file order, "*" last),
// walks it in order skipping entries whose `when` renders false (evaluated
// with .turn = T), and plays the T-th remaining entry. No such entry is a
// permanent error (`script "x.yaml": directive "test/a" has no turn 4`).
//
// Every string is a Go text/template over .inputs, .turn, .thread_id,
// .parent_id, .previous_thread_id, .chain_index, .last_tool_result (the
// content of the last tool message), .tool_results (the contents of the
// previous turn's tool results, in call order), .children (the ids of
// the children the thread has started so far, as its conversation holds
// them: SpawnedChildren; `spool thread export-script` writes a recorded
// child's id as {{index .children N}}) and .tools (the ids of the tools
// offered to the model this turn, sorted), with the builtins (eq,
// lt, and, not, printf ...) and add, sub, mul, atoi, toJSON, default,
// contains, field and fields. add, sub, mul and atoi take numbers or
// numeric strings ("2" as --input gives it). field NAME TEXT reads one
// field of a JSON tool result ({{field "thread_id" .last_tool_result}}: a
// spawned child's id); fields NAME LIST reads it from each of a list of
// results ({{toJSON (fields "thread_id" .tool_results)}}: the ids of the
// children an async fan-out started, for wait_threads). A missing key
// renders "<no value>".
//
// Tool call inputs are rendered recursively through maps and lists. A string
// holding text around or between actions ("chain_L{{.inputs.level}}.txt")
// always stays a string. A string that is exactly one action
// ("{{add .inputs.level 1}}") is typed from its output: a JSON number,
// true/false, object or array becomes that value (so "{{toJSON .inputs}}"
// passes an object), anything else stays a string.
//
// `when` renders to true/1/yes or false/0/no/"" (or "<no value>"); anything
// else is an error. `usage` defaults, per field, to estimates: input from
// the request's messages, output from the text and tool calls. Tool call ids
// are call_<turn>_<n> (n from 1). The text is streamed to onDelta in up to
// four chunks, `stream_delay` apart. `latency` sleeps before answering, aborted by ctx. `price`
// prices input and cache tokens at input_per_mtok; a script without a price
// costs nothing (it calls no model).
type Scripted struct {
	name          string
	contextWindow int
	price         Price
	latency       time.Duration
	streamDelay   time.Duration // between two streamed chunks
	exact         map[string][]*scriptTurn
	globs         []scriptGlob // file order, "*" moved last
	size          int          // the bytes it was parsed from, once cached
}

type scriptGlob struct {
	pattern string
	turns   []*scriptTurn
}

type scriptTurn struct {
	text      *template.Template
	calls     []scriptCall
	usageIn   *int
	usageOut  *int
	when      *template.Template
	whenSet   bool
	directive string
	index     int
}

type scriptCall struct {
	tool  *template.Template
	input any // tree of map[string]any, []any, scalars and *inputTemplate
}

type inputTemplate struct {
	t     *template.Template
	whole bool
}

type scriptFile struct {
	ContextWindow int `yaml:"context_window"`
	Price         *struct {
		Input  float64 `yaml:"input_per_mtok"`
		Output float64 `yaml:"output_per_mtok"`
	} `yaml:"price"`
	Latency     string                     `yaml:"latency"`
	StreamDelay string                     `yaml:"stream_delay"`
	Directives  map[string][]rawScriptTurn `yaml:"directives"`
}

type rawScriptTurn struct {
	Text      string `yaml:"text"`
	ToolCalls []struct {
		Tool  string `yaml:"tool"`
		Input any    `yaml:"input"`
	} `yaml:"tool_calls"`
	Usage *struct {
		Input  *int `yaml:"input"`
		Output *int `yaml:"output"`
	} `yaml:"usage"`
	When *string `yaml:"when"`
}

// NewScripted reads and parses the script at path with readFile (nil means
// os.ReadFile).
func NewScripted(path string, readFile func(string) ([]byte, error)) (*Scripted, error) {
	if strings.TrimSpace(path) == "" {
		return nil, fmt.Errorf("script: empty path in model %q", "script:")
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("script %q: %w", path, err)
	}
	if err := checkScriptSize(path, len(data)); err != nil {
		return nil, err
	}
	key := scriptKey{path, sha256.Sum256(data)}
	if s, ok := parsedScripts.Get(key); ok {
		return s, nil
	}
	s, err := ParseScript(path, data)
	if err != nil {
		return nil, err
	}
	cacheScript(key, s, len(data))
	return s, nil
}

// MaxScriptBytes is the largest script the scripted provider reads. A
// parsed script holds a template per string with an action, text and
// tool name, up to ~90 times its size in memory: a 1 MiB script parses
// into at most ~100 MB.
const MaxScriptBytes = 1 << 20

// maxCachedScriptBytes bounds the scripts the cache keeps, by their
// size: the least recently used go first.
const maxCachedScriptBytes = 4 << 20

// checkScriptSize refuses a script of n bytes over MaxScriptBytes.
func checkScriptSize(name string, n int) error {
	if n > MaxScriptBytes {
		return fmt.Errorf("script %q: %d bytes, over the %d (1 MiB) a script may hold", name, n, MaxScriptBytes)
	}
	return nil
}

// parsedScripts caches parsed scripts by path and content, the 64 used
// last, at most maxCachedScriptBytes of them: a worker builds a provider
// for every activation, and a Scripted is immutable once parsed
// (text/template executes concurrently), so activations of one script
// share one parse.
var (
	parsedScripts, _ = lru.NewWithEvict[scriptKey, *Scripted](64, func(_ scriptKey, s *Scripted) { // an error only for a size <= 0
		cachedScriptBytes.Add(-int64(s.size))
	})
	cachedScriptBytes atomic.Int64
	cacheScriptMu     sync.Mutex
)

// cacheScript keeps s (parsed from n bytes) in parsedScripts, evicting
// the least recently used past maxCachedScriptBytes.
func cacheScript(key scriptKey, s *Scripted, n int) {
	cacheScriptMu.Lock()
	defer cacheScriptMu.Unlock()
	s.size = n
	if _, ok := parsedScripts.Peek(key); ok {
		return
	}
	parsedScripts.Add(key, s)
	cachedScriptBytes.Add(int64(n))
	for cachedScriptBytes.Load() > maxCachedScriptBytes && parsedScripts.Len() > 1 {
		parsedScripts.RemoveOldest()
	}
}

type scriptKey struct {
	path string
	sum  [sha256.Size]byte
}

// ParseScript parses a script; name appears in every error.
func ParseScript(name string, data []byte) (*Scripted, error) {
	if err := checkScriptSize(name, len(data)); err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("script %q: %s", name, fmt.Sprintf(format, args...))
	}
	f, keys, err := decodeScript(data)
	if err != nil {
		return nil, fail("%v", err)
	}
	if len(f.Directives) == 0 {
		return nil, fail("no directives")
	}
	s := &Scripted{name: name, contextWindow: f.ContextWindow, exact: map[string][]*scriptTurn{}}
	if err := s.setOptions(&f); err != nil {
		return nil, fail("%v", err)
	}
	if err := s.addDirectives(f.Directives, keys); err != nil {
		return nil, fail("%v", err)
	}
	return s, nil
}

// decodeScript decodes a script, refusing a key it does not know, and
// reads the keys of its directives in file order, which a second pass
// keeps (the map of the first loses it).
func decodeScript(data []byte) (f scriptFile, keys []string, err error) {
	if err := yamlstrict.Decode(data, &f); err != nil {
		return f, nil, err
	}
	var order struct {
		Directives yaml.Node `yaml:"directives"`
	}
	if err := yaml.Unmarshal(data, &order); err != nil {
		return f, nil, err
	}
	for i := 0; i+1 < len(order.Directives.Content); i += 2 {
		keys = append(keys, order.Directives.Content[i].Value)
	}
	return f, keys, nil
}

// setOptions takes the script's context window (the default when it sets
// none), price and latency from f, refusing a negative one.
func (s *Scripted) setOptions(f *scriptFile) error {
	if s.contextWindow == 0 {
		s.contextWindow = DefaultScriptContextWindow
	}
	if f.ContextWindow < 0 {
		return errors.New("context_window must not be negative")
	}
	if f.Price != nil {
		if f.Price.Input < 0 || f.Price.Output < 0 {
			return errors.New("price must not be negative")
		}
		s.price = Price{InputPerMTok: f.Price.Input, OutputPerMTok: f.Price.Output,
			CacheReadPerMTok: f.Price.Input, CacheWritePerMTok: f.Price.Input}
	}
	if f.Latency != "" {
		d, err := time.ParseDuration(f.Latency)
		if err != nil || d < 0 {
			return fmt.Errorf("latency %q is not a duration like 0ms or 50ms", f.Latency)
		}
		s.latency = d
	}
	if f.StreamDelay != "" {
		d, err := time.ParseDuration(f.StreamDelay)
		if err != nil || d < 0 {
			return fmt.Errorf("stream_delay %q is not a duration like 0ms or 50ms", f.StreamDelay)
		}
		s.streamDelay = d
	}
	return nil
}

// addDirectives parses the turns of each directive, keys giving the file
// order, into the exact keys and the globs of s, the "*" glob last.
func (s *Scripted) addDirectives(directives map[string][]rawScriptTurn, keys []string) error {
	var star []*scriptTurn
	hasStar := false
	for _, key := range keys {
		turns, err := parseDirective(key, directives[key])
		if err != nil {
			return err
		}
		switch {
		case key == "*":
			star, hasStar = turns, true
		case strings.ContainsAny(key, "*?["):
			if _, err := path.Match(key, ""); err != nil {
				return fmt.Errorf("directive pattern %q: %w", key, err)
			}
			s.globs = append(s.globs, scriptGlob{pattern: key, turns: turns})
		default:
			s.exact[key] = turns
		}
	}
	if hasStar {
		s.globs = append(s.globs, scriptGlob{pattern: "*", turns: star})
	}
	return nil
}

// parseDirective parses the turns of the directive key, which must have
// one at least.
func parseDirective(key string, raws []rawScriptTurn) ([]*scriptTurn, error) {
	if len(raws) == 0 {
		return nil, fmt.Errorf("directive %q has no turns", key)
	}
	turns := make([]*scriptTurn, len(raws))
	for j, raw := range raws {
		t, err := parseScriptTurn(key, j+1, raw)
		if err != nil {
			return nil, err
		}
		turns[j] = t
	}
	return turns, nil
}

func parseScriptTurn(directive string, n int, raw rawScriptTurn) (*scriptTurn, error) {
	where := fmt.Sprintf("directive %q turn %d", directive, n)
	t := &scriptTurn{directive: directive, index: n}
	var err error
	if t.text, err = parseTemplate(where+" text", raw.Text); err != nil {
		return nil, err
	}
	if raw.When != nil {
		t.whenSet = true
		if t.when, err = parseTemplate(where+" when", *raw.When); err != nil {
			return nil, err
		}
	}
	if raw.Usage != nil {
		if (raw.Usage.Input != nil && *raw.Usage.Input < 0) || (raw.Usage.Output != nil && *raw.Usage.Output < 0) {
			return nil, fmt.Errorf("%s: usage must not be negative", where)
		}
		t.usageIn, t.usageOut = raw.Usage.Input, raw.Usage.Output
	}
	for i, c := range raw.ToolCalls {
		cw := fmt.Sprintf("%s tool_calls[%d]", where, i)
		if strings.TrimSpace(c.Tool) == "" {
			return nil, fmt.Errorf("%s: tool is required", cw)
		}
		sc := scriptCall{}
		if sc.tool, err = parseTemplate(cw+" tool", c.Tool); err != nil {
			return nil, err
		}
		if sc.input, err = parseInputTree(cw+" input", c.Input); err != nil {
			return nil, err
		}
		if sc.input == nil {
			sc.input = map[string]any{}
		}
		if _, ok := sc.input.(map[string]any); !ok {
			return nil, fmt.Errorf("%s: input must be a mapping", cw)
		}
		t.calls = append(t.calls, sc)
	}
	return t, nil
}

func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(scriptFuncs).Parse(text)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func parseInputTree(where string, v any) (any, error) {
	return mapTree(where, v, func(where string, v any) (any, error) {
		switch x := v.(type) {
		case map[any]any:
			return nil, fmt.Errorf("%s: mapping keys must be strings", where)
		case string:
			if !strings.Contains(x, "{{") {
				return x, nil
			}
			t, err := parseTemplate(where, x)
			if err != nil {
				return nil, err
			}
			trimmed := strings.TrimSpace(x)
			whole := strings.HasPrefix(trimmed, "{{") && strings.HasSuffix(trimmed, "}}") && strings.Count(trimmed, "{{") == 1
			return &inputTemplate{t: t, whole: whole}, nil
		default:
			return v, nil
		}
	})
}

// mapTree rebuilds the maps and slices of v with leaf applied to every
// other value in them; where names the value (input.a[2]) for leaf.
func mapTree(where string, v any, leaf func(where string, v any) (any, error)) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := mapTree(where+"."+k, e, leaf)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := mapTree(fmt.Sprintf("%s[%d]", where, i), e, leaf)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return leaf(where, v)
	}
}

// ContextWindow implements Provider: the script's context_window.
func (s *Scripted) ContextWindow(string) int { return s.contextWindow }

// Cost implements Provider with the script's price.
func (s *Scripted) Cost(_ string, u Usage) (float64, error) { return s.price.Cost(u), nil }

// Complete implements Provider by playing the script.
func (s *Scripted) Complete(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	turn := turnOf(req)
	data := s.templateData(req, turn)
	entry, err := s.pick(req, turn, data)
	if err != nil {
		return nil, err
	}
	resp, err := s.render(entry, turn, data)
	if err != nil {
		return nil, err
	}
	resp.Usage = entry.usage(req, resp)
	if onDelta != nil && resp.Text != "" {
		for i, c := range chunks(resp.Text, 4) {
			if i > 0 && s.streamDelay > 0 {
				if err := sleepCtx(ctx, s.streamDelay); err != nil {
					return nil, err
				}
			}
			if err := ctx.Err(); err != nil {
				return nil, ctxError(ctx, err)
			}
			onDelta(c)
		}
	}
	if onDelta != nil && req.OnToolDelta != nil {
		for i, c := range resp.ToolCalls {
			for _, piece := range chunks(string(c.Input), 2) {
				req.OnToolDelta(ToolDelta{Index: i, ID: c.ID, Name: c.Name, Args: piece})
			}
		}
	}
	return resp, nil
}

// wait sleeps the script's latency before an answer, and fails when ctx
// ends first or has ended already.
func (s *Scripted) wait(ctx context.Context) error {
	if s.latency > 0 {
		if err := sleepCtx(ctx, s.latency); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return ctxError(ctx, err)
	}
	return nil
}

// sleepCtx sleeps d, failing when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctxError(ctx, ctx.Err())
	case <-timer.C:
		return nil
	}
}

// turnOf is the turn the request plays: Request.Thread.Turn, or when that
// is not set the number of assistant messages + 1.
func turnOf(req *Request) int {
	if req.Thread.Turn > 0 {
		return req.Thread.Turn
	}
	turn := 1
	for _, m := range req.Messages {
		if m.Role == thread.RoleAssistant {
			turn++
		}
	}
	return turn
}

// usage is the usage the turn t reports for resp: each of its usage's
// fields, or an estimate where it gives none (input from the request's
// messages, output from resp's text and tool calls).
func (t *scriptTurn) usage(req *Request, resp *Response) Usage {
	u := Usage{}
	if t.usageIn != nil {
		u.InputTokens = *t.usageIn
	} else {
		for _, m := range req.Messages {
			u.InputTokens += thread.EstimateMessageTokens(m)
		}
	}
	if t.usageOut != nil {
		u.OutputTokens = *t.usageOut
	} else {
		u.OutputTokens = thread.EstimateMessageTokens(thread.Message{Role: thread.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
	}
	return u
}

func (s *Scripted) permanent(format string, args ...any) *Error {
	err := fmt.Errorf("script %q: %s", s.name, fmt.Sprintf(format, args...))
	return &Error{Class: ClassPermanent, Message: err.Error(), Err: err}
}

func (s *Scripted) templateData(req *Request, turn int) map[string]any {
	inputs := req.Thread.Inputs
	if inputs == nil {
		inputs = map[string]any{}
	}
	last := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == thread.RoleTool {
			last = req.Messages[i].Content
			break
		}
	}
	// The results of the previous turn's calls, in call order: the tool
	// messages after the last assistant message.
	results := []any{}
	for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != thread.RoleAssistant; i-- {
		if req.Messages[i].Role == thread.RoleTool {
			results = append([]any{req.Messages[i].Content}, results...)
		}
	}
	return map[string]any{
		"inputs":             inputs,
		"turn":               turn,
		"thread_id":          req.Thread.ID,
		"parent_id":          req.Thread.ParentID,
		"previous_thread_id": req.Thread.PreviousThreadID,
		"chain_index":        req.Thread.ChainIndex,
		"last_tool_result":   last,
		"tool_results":       results,
		"children":           SpawnedChildren(req.Messages),
		"tools":              toolIDs(req.Tools),
	}
}

// toolIDs are the names of the offered tools, sorted.
func toolIDs(defs []thread.ToolDef) []string {
	ids := make([]string, 0, len(defs))
	for _, d := range defs {
		ids = append(ids, d.Name)
	}
	sort.Strings(ids)
	return ids
}

// SpawnTool is the tool that starts a child thread.
const SpawnTool = "rye/agent/threads/thread_directive"

// SpawnedChildren lists the children a conversation shows started: the
// thread_id of each SpawnTool result that names one (an asynchronous
// spawn's answer, a synchronous spawn's child result), in the order of
// the conversation, each once.
func SpawnedChildren(msgs []thread.Message) []string {
	ids := []string{}
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.Role != thread.RoleTool || m.ToolName != SpawnTool || !strings.Contains(m.Content, `"thread_id"`) {
			continue
		}
		var r struct {
			ThreadID string `json:"thread_id"`
		}
		if json.Unmarshal([]byte(m.Content), &r) == nil && r.ThreadID != "" && !seen[r.ThreadID] {
			seen[r.ThreadID] = true
			ids = append(ids, r.ThreadID)
		}
	}
	return ids
}

func (s *Scripted) entries(directive string) ([]*scriptTurn, bool) {
	if t, ok := s.exact[directive]; ok {
		return t, true
	}
	for _, g := range s.globs {
		if ok, _ := path.Match(g.pattern, directive); ok || g.pattern == "*" {
			return g.turns, true
		}
	}
	return nil, false
}

func (s *Scripted) pick(req *Request, turn int, data map[string]any) (*scriptTurn, error) {
	directive := req.Thread.Directive
	turns, ok := s.entries(directive)
	if !ok {
		return nil, s.permanent("no entry for directive %q", directive)
	}
	n := 0
	for _, t := range turns {
		if t.whenSet {
			out, err := execute(t.when, data)
			if err != nil {
				return nil, s.permanent("%v", err)
			}
			keep, err := truthy(out)
			if err != nil {
				return nil, s.permanent("directive %q turn %d when: %v", t.directive, t.index, err)
			}
			if !keep {
				continue
			}
		}
		n++
		if n == turn {
			return t, nil
		}
	}
	return nil, s.permanent("directive %q has no turn %d (it has %d)%s", directive, turn, n, askedBy(req))
}

// askedBy says what the thread last told the model before the turn a
// script lacks, when that was a message (the runtime's reminder to call
// directive_return, a resume's or a send's text): often why the thread
// went on past the script's last turn.
func askedBy(req *Request) string {
	if len(req.Messages) == 0 {
		return ""
	}
	m := req.Messages[len(req.Messages)-1]
	if m.Role != thread.RoleUser || len(req.Messages) == 1 {
		return ""
	}
	text := strings.Join(strings.Fields(m.Content), " ")
	if r := []rune(text); len(r) > 160 {
		text = string(r[:159]) + "…"
	}
	return fmt.Sprintf("; the thread went on after the message %q", text)
}

func (s *Scripted) render(t *scriptTurn, turn int, data map[string]any) (*Response, error) {
	text, err := execute(t.text, data)
	if err != nil {
		return nil, s.permanent("%v", err)
	}
	r := &Response{Text: text, Model: "script:" + s.name, StopReason: "end_turn"}
	for i, c := range t.calls {
		name, err := execute(c.tool, data)
		if err != nil {
			return nil, s.permanent("%v", err)
		}
		in, err := renderInput(c.input, data)
		if err != nil {
			return nil, s.permanent("%v", err)
		}
		raw, err := json.Marshal(in)
		if err != nil {
			return nil, s.permanent("directive %q turn %d tool_calls[%d] input: %v", t.directive, t.index, i, err)
		}
		r.ToolCalls = append(r.ToolCalls, thread.ToolCall{ID: fmt.Sprintf("call_%d_%d", turn, i+1), Name: strings.TrimSpace(name), Input: raw})
	}
	if len(r.ToolCalls) > 0 {
		r.StopReason = "tool_use"
	}
	return r, nil
}

func execute(t *template.Template, data any) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

func renderInput(v any, data map[string]any) (any, error) {
	return mapTree("input", v, func(_ string, v any) (any, error) {
		x, ok := v.(*inputTemplate)
		if !ok {
			return v, nil
		}
		s, err := execute(x.t, data)
		if err != nil {
			return nil, err
		}
		if x.whole {
			return typedOutput(s), nil
		}
		return s, nil
	})
}

// typedOutput types the output of a whole-value template: a JSON number,
// boolean, object or array becomes that value; anything else stays a string.
func typedOutput(s string) any {
	t := strings.TrimSpace(s)
	if t == "" || t == "null" {
		return s
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return s
	}
	switch v.(type) {
	case json.Number, bool, map[string]any, []any:
		return v
	}
	return s
}

func truthy(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no", "", "<no value>":
		return false, nil
	}
	return false, fmt.Errorf("renders %q, want true or false", strings.TrimSpace(s))
}

// chunks splits s into at most n pieces on rune boundaries.
func chunks(s string, n int) []string {
	size := (len(s) + n - 1) / n
	var out []string
	for len(s) > 0 {
		end := size
		if end >= len(s) {
			end = len(s)
		}
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

var _ Provider = (*Scripted)(nil)
