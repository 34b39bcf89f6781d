package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/spool-run/spool/thread"
)

// KnowledgeMeta is the frontmatter of a thread's knowledge render.
type KnowledgeMeta struct {
	ThreadID  string
	Directive string
	Status    string
	Model     string
	Turns     int
	Spend     float64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// yamlString quotes s as a YAML double-quoted scalar: its JSON encoding
// (json.Marshal's, HTML characters escaped), which is one.
func yamlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fence returns a backtick fence longer than any backtick run in s (at
// least 3).
func fence(s string) string {
	longest := 0
	for i := strings.IndexByte(s, '`'); i >= 0; {
		j := i + 1
		for j < len(s) && s[j] == '`' {
			j++
		}
		longest = max(longest, j-i)
		k := strings.IndexByte(s[j:], '`')
		if k < 0 {
			break
		}
		i = j + k
	}
	return strings.Repeat("`", max(3, longest+1))
}

// fenced is s in a code fence tagged lang, s ending with a newline.
func fenced(lang, s string) string {
	f := fence(s)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return f + lang + "\n" + s + f + "\n"
}

// RenderKnowledge renders the transcript as the spec's knowledge entry:
// a fenced YAML frontmatter block (entry_type thread_transcript, thread_id,
// directive, status, model, turns, spend, capabilities_ref) and
// cognition-framed sections per turn. It is unsigned; SignMarkdown it (or
// use SignedKnowledge). Deterministic for the same input.
func RenderKnowledge(meta KnowledgeMeta, events []Event) []byte {
	k := &knowledgeWriter{}
	k.frontmatter(meta)
	fmt.Fprintf(&k.b, "# %s\n\n", meta.ThreadID)
	for _, ev := range events {
		if write, ok := knowledgeWriters[ev.Type]; ok {
			write(k, ev)
		}
	}
	return k.b.Bytes()
}

// knowledgeWriter is a knowledge entry being written, with the number of
// the turn the last response ended.
type knowledgeWriter struct {
	b    bytes.Buffer
	turn int
}

// frontmatter writes the entry's fenced YAML frontmatter from meta; the
// times only when known.
func (k *knowledgeWriter) frontmatter(meta KnowledgeMeta) {
	b := &k.b
	b.WriteString("```yaml\n")
	fmt.Fprintf(b, "name: %s\n", yamlString(meta.ThreadID))
	fmt.Fprintf(b, "title: %s\n", yamlString("Thread transcript: "+meta.Directive))
	b.WriteString("entry_type: thread_transcript\n")
	fmt.Fprintf(b, "category: %s\n", yamlString("agent/threads/"+meta.Directive))
	fmt.Fprintf(b, "thread_id: %s\n", yamlString(meta.ThreadID))
	fmt.Fprintf(b, "directive: %s\n", yamlString(meta.Directive))
	fmt.Fprintf(b, "status: %s\n", yamlString(meta.Status))
	fmt.Fprintf(b, "model: %s\n", yamlString(meta.Model))
	fmt.Fprintf(b, "turns: %d\n", meta.Turns)
	fmt.Fprintf(b, "spend: %s\n", formatFloat(meta.Spend))
	fmt.Fprintf(b, "capabilities_ref: %s\n", yamlString(".ai/agent/threads/"+meta.ThreadID+"/capabilities.md"))
	if !meta.CreatedAt.IsZero() {
		fmt.Fprintf(b, "created_at: %s\n", meta.CreatedAt.UTC().Format(time.RFC3339))
	}
	if !meta.UpdatedAt.IsZero() {
		fmt.Fprintf(b, "updated_at: %s\n", meta.UpdatedAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("```\n\n")
}

// knowledgeWriters write an event's section of the entry, by the event's
// type; an event of any other type is bookkeeping the entry leaves out.
var knowledgeWriters = map[string]func(*knowledgeWriter, Event){
	TypeThreadStarted: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadStarted](ev)
		fmt.Fprintf(&k.b, "> thread started: directive `%s`", p.Directive)
		if p.Model != "" {
			fmt.Fprintf(&k.b, ", model `%s`", p.Model)
		}
		k.b.WriteString("\n\n")
	},
	TypeCognitionIn: func(k *knowledgeWriter, ev Event) {
		p := Payload[CognitionIn](ev)
		fmt.Fprintf(&k.b, "## Input — Turn %d\n\n%s\n\n", k.turn+1, strings.TrimRight(p.Content, "\n"))
	},
	TypeCognitionOut: (*knowledgeWriter).response,
	TypeToolCallResult: func(k *knowledgeWriter, ev Event) {
		p := Payload[ToolCallResult](ev)
		title := "### Result"
		if p.IsError {
			title = "### Error"
		}
		fmt.Fprintf(&k.b, "%s: %s\n\n%s\n", title, p.Tool, fenced("", p.Output))
	},
	TypeThreadHandoff: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadHandoff](ev)
		fmt.Fprintf(&k.b, "> handoff to `%s` (%d trailing turns)\n\n", p.NewThreadID, p.TrailingTurns)
	},
	TypeThreadContinued: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadContinued](ev)
		fmt.Fprintf(&k.b, "> continues `%s`\n\n", p.PreviousThreadID)
	},
	TypeThreadForked: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadForked](ev)
		fmt.Fprintf(&k.b, "> forked from `%s` at turn %d (segment %d, chain hash %s)\n\n", p.ForkedFrom, p.ForkTurn, p.SourceSegment, p.SourceChainHash)
	},
	TypeThreadResumed: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadResumed](ev)
		fmt.Fprintf(&k.b, "> resumed as `%s`\n\n", p.NewThreadID)
	},
	TypeChildSpawned: func(k *knowledgeWriter, ev Event) {
		p := Payload[ChildSpawned](ev)
		fmt.Fprintf(&k.b, "> spawned child `%s` (%s)\n\n", p.ChildID, p.Directive)
		if len(p.DroppedCapabilities) > 0 {
			fmt.Fprintf(&k.b, "> **runs without** %s: this thread does not hold them\n\n", codeList(p.DroppedCapabilities))
		}
	},
	TypeChildRefused: func(k *knowledgeWriter, ev Event) {
		p := Payload[ChildRefused](ev)
		fmt.Fprintf(&k.b, "> **spawn refused** (%s) %s\n\n", p.Directive, p.Message)
	},
	TypeLimitExceeded: func(k *knowledgeWriter, ev Event) {
		p := Payload[LimitExceeded](ev)
		fmt.Fprintf(&k.b, "> **limit** %s: %s of %s\n\n", p.Code, formatFloat(p.Current), formatFloat(p.Max))
	},
	TypeThreadError: func(k *knowledgeWriter, ev Event) {
		p := Payload[Error](ev)
		fmt.Fprintf(&k.b, "> **error** %s\n\n", strings.TrimSpace(p.Class+" "+p.Message))
	},
	TypeThreadWaiting: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadWaiting](ev)
		fmt.Fprintf(&k.b, "> waiting on %s\n\n", codeList(p.ChildIDs))
	},
	TypeHookFired: func(k *knowledgeWriter, ev Event) {
		// Hooks that worked show in what they injected or wrote; a
		// failed one (a refused capability, a missing item) only here.
		p := Payload[HookFired](ev)
		if p.Error != "" {
			fmt.Fprintf(&k.b, "> **hook error** `%s` (%s): %s\n\n", p.HookID, p.Event, p.Error)
		}
	},
	TypeThreadCancelled: func(k *knowledgeWriter, ev Event) {
		p := Payload[ThreadCancelled](ev)
		k.b.WriteString(strings.TrimSpace("> **cancelled** "+p.Reason) + "\n\n")
	},
	TypeThreadCompleted: (*knowledgeWriter).completed,
}

// response writes a model call's answer, its text and its tool calls,
// under the turn it ends: the next turn, or the turn the event names when
// that is further on.
func (k *knowledgeWriter) response(ev Event) {
	p := Payload[CognitionOut](ev)
	k.turn = max(k.turn+1, p.Turn)
	fmt.Fprintf(&k.b, "### Response — Turn %d\n\n", k.turn)
	if p.Content != "" {
		fmt.Fprintf(&k.b, "%s\n\n", strings.TrimRight(p.Content, "\n"))
	}
	for _, c := range p.ToolCalls {
		fmt.Fprintf(&k.b, "### Tool: %s\n\n%s\n", c.Name, fenced("json", string(c.Input)))
	}
}

// completed writes how the thread ended: its status when other than
// completed, its error, its result and its outputs, sorted by name.
func (k *knowledgeWriter) completed(ev Event) {
	p := Payload[ThreadCompleted](ev)
	if p.Status == "" || p.Status == "completed" {
		k.b.WriteString("## Completed\n\n")
	} else {
		fmt.Fprintf(&k.b, "## Ended: %s\n\n", p.Status)
	}
	if p.Error != nil {
		fmt.Fprintf(&k.b, "> **error** %s\n\n", strings.TrimSpace(p.Error.Code+" "+p.Error.Message))
	}
	if p.Result != "" {
		fmt.Fprintf(&k.b, "%s\n\n", strings.TrimRight(p.Result, "\n"))
	}
	if len(p.Outputs) > 0 {
		for _, name := range slices.Sorted(maps.Keys(p.Outputs)) {
			fmt.Fprintf(&k.b, "- `%s`: %s\n", name, p.Outputs[name])
		}
		k.b.WriteString("\n")
	}
}

func codeList(ids []string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = "`" + id + "`"
	}
	return strings.Join(quoted, ", ")
}

// formatFloat writes f as json.Marshal does; NaN and the infinities, which
// json.Marshal refuses, as nothing.
func formatFloat(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// SignedKnowledge is RenderKnowledge signed with SignMarkdown.
func SignedKnowledge(meta KnowledgeMeta, events []Event, signer *Signer, now time.Time) []byte {
	return SignMarkdown(RenderKnowledge(meta, events), signer, now)
}

// RenderCapabilities renders capabilities.md: the thread's tool
// definitions in a JSON fenced block and its capabilities tree in a code
// fence. Have the checkpoint written with it attest it (Writer.Attest;
// ParseCapabilities reads it back), or sign it with SignMarkdown
// (ReadCapabilities).
func RenderCapabilities(threadID string, tools []thread.ToolDef, capabilities []string) ([]byte, error) {
	toolsJSON, err := indentTools(tools)
	if err != nil {
		return nil, fmt.Errorf("render capabilities: %w", err)
	}
	list, caps := fenced("json", string(toolsJSON)), capabilitiesSection(capabilities)
	title := capabilitiesTitle(threadID)
	b := make([]byte, 0, len(title)+len("## Tools\n\n\n")+len(list)+len(caps))
	b = append(append(append(append(b, title...), "## Tools\n\n"...), list...), '\n')
	return append(b, caps...), nil
}

// indentTools is json.MarshalIndent(tools, "", "  "), each tool's
// indented object taken from toolJSON: a fleet renders the same few tool
// definitions for every thread it starts.
func indentTools(tools []thread.ToolDef) ([]byte, error) {
	if len(tools) == 0 {
		return json.MarshalIndent(tools, "", "  ")
	}
	var b bytes.Buffer
	b.WriteString("[\n  ")
	for i, t := range tools {
		if i > 0 {
			b.WriteString(",\n  ")
		}
		obj, err := toolJSON(t)
		if err != nil {
			return nil, err
		}
		b.Write(obj)
	}
	b.WriteString("\n]")
	return b.Bytes(), nil
}

// toolJSONs holds tools' indented objects (as an element of the indented
// list: prefix and indent "  "), keyed by the whole definition.
var toolJSONs, _ = lru.New[string, []byte](1024) // an error only for a size <= 0

func toolJSON(t thread.ToolDef) ([]byte, error) {
	key := t.Name + "\x00" + t.Description + "\x00" + string(t.InputSchema)
	if obj, ok := toolJSONs.Get(key); ok {
		return obj, nil
	}
	obj, err := json.MarshalIndent(t, "  ", "  ")
	if err != nil {
		return nil, err
	}
	toolJSONs.Add(key, obj)
	return obj, nil
}

func capabilitiesTitle(threadID string) string { return "# Capabilities: " + threadID + "\n\n" }

// capabilitiesSection is the end of capabilities.md: the heading and the
// fenced tree of the capabilities, in any order.
func capabilitiesSection(capabilities []string) string {
	caps := slices.Clone(capabilities)
	slices.Sort(caps)
	return "## Capabilities\n\n" + fenced("", capabilityTree(caps))
}

// capabilityTree draws "rye.execute.tool.x" strings as an indented tree.
func capabilityTree(caps []string) string {
	var b strings.Builder
	var prev []string
	for _, c := range caps {
		parts := strings.Split(c, ".")
		common := 0
		for common < len(prev) && common < len(parts) && prev[common] == parts[common] {
			common++
		}
		for i := common; i < len(parts); i++ {
			b.WriteString(strings.Repeat("  ", i))
			b.WriteString(parts[i])
			b.WriteString("\n")
		}
		prev = parts
	}
	return b.String()
}

var capJSONBlock = regexp.MustCompile("(?s)## Tools\n\n(`{3,})json\n(.*?)\n(`{3,})\n")

// CapabilitiesFile is a verified capabilities.md.
type CapabilitiesFile struct {
	Tools     []thread.ToolDef
	Signature MarkdownSignature // zero for an attested file
	body      []byte
}

// For reports whether the file was rendered for threadID.
func (f *CapabilitiesFile) For(threadID string) bool {
	return bytes.HasPrefix(f.body, []byte(capabilitiesTitle(threadID)))
}

// Lists reports whether the file's capabilities tree is the one
// RenderCapabilities draws for capabilities. The tree is as precise as a
// drawing: a capability that is a prefix of another one it lists (a.b
// beside a.b.c) adds no line, so the exact list is thread.json's to tell.
func (f *CapabilitiesFile) Lists(capabilities []string) bool {
	return bytes.HasSuffix(f.body, []byte(capabilitiesSection(capabilities)))
}

// VerifyCapabilities verifies a signed capabilities.md and returns its tool
// definitions.
func VerifyCapabilities(data []byte, keyring *Keyring) ([]thread.ToolDef, error) {
	f, err := ReadCapabilities(data, keyring)
	if err != nil {
		return nil, err
	}
	return f.Tools, nil
}

// ReadCapabilities verifies a signed capabilities.md and parses it.
func ReadCapabilities(data []byte, keyring *Keyring) (*CapabilitiesFile, error) {
	body, sig, err := VerifyMarkdown(data, keyring)
	if err != nil {
		return nil, fmt.Errorf("capabilities.md: %w", err)
	}
	f, err := ParseCapabilities(body)
	if err != nil {
		return nil, err
	}
	f.Signature = sig
	return f, nil
}

// ParseCapabilities parses capabilities.md as RenderCapabilities drew it,
// with no signature line: a file a checkpoint attests, which the caller
// has found attested (Transcript.Attested).
func ParseCapabilities(body []byte) (*CapabilitiesFile, error) {
	m := capJSONBlock.FindSubmatch(body)
	if m == nil || string(m[1]) != string(m[3]) {
		return nil, fmt.Errorf("capabilities.md: no tools JSON block")
	}
	var tools []thread.ToolDef
	if err := json.Unmarshal(m[2], &tools); err != nil {
		return nil, fmt.Errorf("capabilities.md: tools: %w", err)
	}
	for i := range tools { // undo the block's indentation
		var c bytes.Buffer
		if len(tools[i].InputSchema) > 0 && json.Compact(&c, tools[i].InputSchema) == nil {
			tools[i].InputSchema = c.Bytes()
		}
	}
	return &CapabilitiesFile{Tools: tools, body: body}, nil
}
