package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

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

// appendYAMLString appends s as a YAML double-quoted scalar: its JSON
// encoding (json.Marshal's, HTML characters escaped), which is one.
func appendYAMLString(b []byte, s string) []byte { return appendJSONString(b, s, true) }

// fence returns the length of a backtick fence longer than any backtick
// run in s (at least 3).
func fence[S []byte | string](s S) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ { // a backtick is never part of a longer UTF-8 sequence
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return max(3, longest+1)
}

const backticks = "````````````````````````````````"

func appendFence(b []byte, n int) []byte {
	for ; n > len(backticks); n -= len(backticks) {
		b = append(b, backticks...)
	}
	return append(b, backticks[:n]...)
}

// appendFenced appends s in a code fence tagged lang, ending s with a
// newline if it does not.
func appendFenced(b []byte, lang, s string) []byte {
	f := fence(s)
	b = appendFence(b, f)
	b = append(b, lang...)
	b = append(b, '\n')
	b = append(b, s...)
	if !strings.HasSuffix(s, "\n") {
		b = append(b, '\n')
	}
	b = appendFence(b, f)
	return append(b, '\n')
}

// RenderKnowledge renders the transcript as the spec's knowledge entry:
// a fenced YAML frontmatter block (entry_type thread_transcript, thread_id,
// directive, status, model, turns, spend, capabilities_ref) and
// cognition-framed sections per turn. It is unsigned; SignMarkdown it (or
// use SignedKnowledge). Deterministic for the same input.
func RenderKnowledge(meta KnowledgeMeta, events []Event) []byte {
	return appendKnowledge(make([]byte, 0, knowledgeSize(events)), meta, events)
}

// knowledgeSize is a capacity for the render of events (an overestimate
// unless tool inputs need long fences).
func knowledgeSize(events []Event) int {
	n := 1024
	for _, ev := range events {
		if ev.Type != TypeTokenDelta {
			n += len(ev.Payload) + 64
		}
	}
	return n
}

// appendKnowledge appends the render of RenderKnowledge to b. Payloads are
// read by payloadReader (encoding/json for any it does not take).
func appendKnowledge(b []byte, meta KnowledgeMeta, events []Event) []byte {
	b = append(b, "```yaml\nname: "...)
	b = appendYAMLString(b, meta.ThreadID)
	b = append(b, "\ntitle: "...)
	b = appendYAMLString(b, "Thread transcript: "+meta.Directive)
	b = append(b, "\nentry_type: thread_transcript\ncategory: "...)
	b = appendYAMLString(b, "agent/threads/"+meta.Directive)
	b = append(b, "\nthread_id: "...)
	b = appendYAMLString(b, meta.ThreadID)
	b = append(b, "\ndirective: "...)
	b = appendYAMLString(b, meta.Directive)
	b = append(b, "\nstatus: "...)
	b = appendYAMLString(b, meta.Status)
	b = append(b, "\nmodel: "...)
	b = appendYAMLString(b, meta.Model)
	b = append(b, "\nturns: "...)
	b = strconv.AppendInt(b, int64(meta.Turns), 10)
	b = append(b, "\nspend: "...)
	b = appendFloat(b, meta.Spend)
	b = append(b, "\ncapabilities_ref: "...)
	b = appendYAMLString(b, ".ai/agent/threads/"+meta.ThreadID+"/capabilities.md")
	b = append(b, '\n')
	if !meta.CreatedAt.IsZero() {
		b = append(b, "created_at: "...)
		b = append(meta.CreatedAt.UTC().AppendFormat(b, time.RFC3339), '\n')
	}
	if !meta.UpdatedAt.IsZero() {
		b = append(b, "updated_at: "...)
		b = append(meta.UpdatedAt.UTC().AppendFormat(b, time.RFC3339), '\n')
	}
	b = append(b, "```\n\n# "...)
	b = append(b, meta.ThreadID...)
	b = append(b, "\n\n"...)
	var r payloadReader
	turn := 0
	for _, ev := range events {
		switch ev.Type {
		case TypeThreadStarted:
			p := r.threadStarted(ev.Payload)
			b = append(b, "> thread started: directive `"...)
			b = append(b, p.Directive...)
			b = append(b, '`')
			if p.Model != "" {
				b = append(b, ", model `"...)
				b = append(b, p.Model...)
				b = append(b, '`')
			}
			b = append(b, "\n\n"...)
		case TypeCognitionIn:
			p := r.cognitionIn(ev.Payload)
			b = append(b, "## Input — Turn "...)
			b = strconv.AppendInt(b, int64(turn+1), 10)
			b = append(b, "\n\n"...)
			b = append(b, strings.TrimRight(p.Content, "\n")...)
			b = append(b, "\n\n"...)
		case TypeCognitionOut:
			p := r.cognitionOut(ev.Payload)
			turn = max(turn+1, p.Turn)
			b = append(b, "### Response — Turn "...)
			b = strconv.AppendInt(b, int64(turn), 10)
			b = append(b, "\n\n"...)
			if p.Content != "" {
				b = append(b, strings.TrimRight(p.Content, "\n")...)
				b = append(b, "\n\n"...)
			}
			for _, c := range p.ToolCalls {
				b = append(b, "### Tool: "...)
				b = append(b, c.Name...)
				b = append(b, "\n\n"...)
				b = appendFenced(b, "json", string(c.Input))
				b = append(b, '\n')
			}
		case TypeToolCallResult:
			p := r.toolCallResult(ev.Payload)
			if p.IsError {
				b = append(b, "### Error: "...)
			} else {
				b = append(b, "### Result: "...)
			}
			b = append(b, p.Tool...)
			b = append(b, "\n\n"...)
			b = appendFenced(b, "", p.Output)
			b = append(b, '\n')
		case TypeThreadHandoff:
			var p ThreadHandoff
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> handoff to `%s` (%d trailing turns)\n\n", p.NewThreadID, p.TrailingTurns)
		case TypeThreadContinued:
			var p ThreadContinued
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> continues `%s`\n\n", p.PreviousThreadID)
		case TypeThreadForked:
			var p ThreadForked
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> forked from `%s` at turn %d (segment %d, chain hash %s)\n\n", p.ForkedFrom, p.ForkTurn, p.SourceSegment, p.SourceChainHash)
		case TypeThreadResumed:
			var p ThreadResumed
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> resumed as `%s`\n\n", p.NewThreadID)
		case TypeChildSpawned:
			var p ChildSpawned
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> spawned child `%s` (%s)\n\n", p.ChildID, p.Directive)
		case TypeChildRefused:
			var p ChildRefused
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> **spawn refused** (%s) %s\n\n", p.Directive, p.Message)
		case TypeLimitExceeded:
			var p LimitExceeded
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> **limit** %s: %s of %s\n\n", p.Code, formatFloat(p.Current), formatFloat(p.Max))
		case TypeThreadError:
			var p Error
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> **error** %s\n\n", strings.TrimSpace(p.Class+" "+p.Message))
		case TypeThreadWaiting:
			var p ThreadWaiting
			_ = ev.Decode(&p)
			b = fmt.Appendf(b, "> waiting on %s\n\n", codeList(p.ChildIDs))
		case TypeHookFired:
			// Hooks that worked show in what they injected or wrote; a
			// failed one (a refused capability, a missing item) only here.
			if p := r.hookFired(ev.Payload); p.Error != "" {
				b = fmt.Appendf(b, "> **hook error** `%s` (%s): %s\n\n", p.HookID, p.Event, p.Error)
			}
		case TypeThreadCancelled:
			var p ThreadCancelled
			_ = ev.Decode(&p)
			b = append(b, strings.TrimSpace("> **cancelled** "+p.Reason)...)
			b = append(b, "\n\n"...)
		case TypeThreadCompleted:
			p := r.threadCompleted(ev.Payload)
			if p.Status == "" || p.Status == "completed" {
				b = append(b, "## Completed\n\n"...)
			} else {
				b = fmt.Appendf(b, "## Ended: %s\n\n", p.Status)
			}
			if p.Error != nil {
				b = fmt.Appendf(b, "> **error** %s\n\n", strings.TrimSpace(p.Error.Code+" "+p.Error.Message))
			}
			if p.Result != "" {
				b = append(b, strings.TrimRight(p.Result, "\n")...)
				b = append(b, "\n\n"...)
			}
			if len(p.Outputs) > 0 {
				for _, k := range slices.Sorted(maps.Keys(p.Outputs)) {
					b = append(b, "- `"...)
					b = append(b, k...)
					b = append(b, "`: "...)
					b = append(b, p.Outputs[k]...)
					b = append(b, '\n')
				}
				b = append(b, '\n')
			}
		}
	}
	return b
}

func codeList(ids []string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = "`" + id + "`"
	}
	return strings.Join(quoted, ", ")
}

// appendFloat appends f as json.Marshal writes a float64; NaN and the
// infinities, which json.Marshal refuses, append nothing.
func appendFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 to e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func formatFloat(f float64) string { return string(appendFloat(nil, f)) }

// SignedKnowledge is RenderKnowledge signed with SignMarkdown.
func SignedKnowledge(meta KnowledgeMeta, events []Event, signer *Signer, now time.Time) []byte {
	// The render goes after room for the signature line, which then
	// takes the end of that room: no copy of the body.
	const room = 256
	buf := appendKnowledge(make([]byte, room, room+knowledgeSize(events)), meta, events)
	body := buf[room:] // never starts with a signature line: it starts with the frontmatter fence
	line := appendSignatureLine(make([]byte, 0, room), body, signer, now)
	if len(line) > room {
		return append(line, body...)
	}
	start := room - len(line)
	copy(buf[start:], line)
	return buf[start:]
}

// RenderCapabilities renders capabilities.md: the thread's tool
// definitions in a JSON fenced block and its capabilities tree in a code
// fence. Sign it with SignMarkdown; ReadCapabilities reads it back.
func RenderCapabilities(threadID string, tools []thread.ToolDef, capabilities []string) ([]byte, error) {
	n := 512 + 64*len(capabilities)
	for _, t := range tools {
		n += 2*len(t.InputSchema) + len(t.Name) + len(t.Description) + 128
	}
	b := make([]byte, 0, n)
	b = append(b, capabilitiesTitle(threadID)...)
	b = append(b, "## Tools\n\n```json\n"...)
	start := len(b)
	b, err := appendToolsJSON(b, tools)
	if err != nil {
		return nil, fmt.Errorf("render capabilities: %w", err)
	}
	if fence(b[start:]) == 3 { // the JSON does not end with a newline
		b = append(b, "\n```\n"...)
	} else { // a string in it holds a run of backticks
		toolsJSON := string(b[start:])
		b = appendFenced(b[:start-len("```json\n")], "json", toolsJSON)
	}
	b = append(b, '\n')
	return appendCapabilitiesSection(b, capabilities), nil
}

// appendToolsJSON appends what json.MarshalIndent(tools, "", "  ") returns.
func appendToolsJSON(b []byte, tools []thread.ToolDef) ([]byte, error) {
	if tools == nil {
		return append(b, "null"...), nil
	}
	if len(tools) == 0 {
		return append(b, "[]"...), nil
	}
	b = append(b, '[')
	for i, t := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n  {\n    \"name\": "...)
		b = appendJSONString(b, t.Name, true)
		b = append(b, ",\n    \"description\": "...)
		b = appendJSONString(b, t.Description, true)
		b = append(b, ",\n    \"input_schema\": "...)
		if t.InputSchema == nil {
			b = append(b, "null"...)
		} else {
			var err error
			if b, err = appendIndentedJSON(b, t.InputSchema, 2); err != nil {
				return nil, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
			}
		}
		b = append(b, "\n  }"...)
	}
	return append(b, "\n]"...), nil
}

func capabilitiesTitle(threadID string) string { return "# Capabilities: " + threadID + "\n\n" }

// capabilitiesSection is the end of capabilities.md: the heading and the
// fenced tree of the capabilities, in any order.
func capabilitiesSection(capabilities []string) string {
	return string(appendCapabilitiesSection(nil, capabilities))
}

func appendCapabilitiesSection(b []byte, capabilities []string) []byte {
	caps := slices.Clone(capabilities)
	slices.Sort(caps)
	b = append(b, "## Capabilities\n\n"...)
	return appendFenced(b, "", capabilityTree(caps))
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
			for range i {
				b.WriteString("  ")
			}
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
	Signature MarkdownSignature
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
	return &CapabilitiesFile{Tools: tools, Signature: sig, body: body}, nil
}
