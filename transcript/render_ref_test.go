package transcript

// The knowledge and capabilities renders and SignMarkdown as they were
// before they wrote straight into one buffer (render.go, signedmd.go):
// the reference TestRenderAgreesWithReference holds them to, and the "old"
// side of the benchmarks.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spool-run/spool/thread"
)

// yamlStringRef quotes s as a YAML double-quoted scalar.
func yamlStringRef(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fenceRef returns a backtick fence longer than any backtick run in s.
func fenceRef(s string) string {
	longest, run := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

func fencedRef(lang, s string) string {
	f := fenceRef(s)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return f + lang + "\n" + s + f + "\n"
}

// renderKnowledgeRef renders the transcript as the spec's knowledge entry:
// a fenced YAML frontmatter block (entry_type thread_transcript, thread_id,
// directive, status, model, turns, spend, capabilities_ref) and
// cognition-framed sections per turn. It is unsigned; SignMarkdown it (or
// use SignedKnowledge). Deterministic for the same input.
func renderKnowledgeRef(meta KnowledgeMeta, events []Event) []byte {
	var b bytes.Buffer
	b.WriteString("```yaml\n")
	fmt.Fprintf(&b, "name: %s\n", yamlStringRef(meta.ThreadID))
	fmt.Fprintf(&b, "title: %s\n", yamlStringRef("Thread transcript: "+meta.Directive))
	b.WriteString("entry_type: thread_transcript\n")
	fmt.Fprintf(&b, "category: %s\n", yamlStringRef("agent/threads/"+meta.Directive))
	fmt.Fprintf(&b, "thread_id: %s\n", yamlStringRef(meta.ThreadID))
	fmt.Fprintf(&b, "directive: %s\n", yamlStringRef(meta.Directive))
	fmt.Fprintf(&b, "status: %s\n", yamlStringRef(meta.Status))
	fmt.Fprintf(&b, "model: %s\n", yamlStringRef(meta.Model))
	fmt.Fprintf(&b, "turns: %d\n", meta.Turns)
	fmt.Fprintf(&b, "spend: %s\n", formatFloatRef(meta.Spend))
	fmt.Fprintf(&b, "capabilities_ref: %s\n", yamlStringRef(".ai/agent/threads/"+meta.ThreadID+"/capabilities.md"))
	if !meta.CreatedAt.IsZero() {
		fmt.Fprintf(&b, "created_at: %s\n", meta.CreatedAt.UTC().Format(time.RFC3339))
	}
	if !meta.UpdatedAt.IsZero() {
		fmt.Fprintf(&b, "updated_at: %s\n", meta.UpdatedAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("```\n\n")
	fmt.Fprintf(&b, "# %s\n\n", meta.ThreadID)
	turn := 0
	for _, ev := range events {
		switch ev.Type {
		case TypeThreadStarted:
			var p ThreadStarted
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> thread started: directive `%s`", p.Directive)
			if p.Model != "" {
				fmt.Fprintf(&b, ", model `%s`", p.Model)
			}
			b.WriteString("\n\n")
		case TypeCognitionIn:
			var p CognitionIn
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "## Input — Turn %d\n\n%s\n\n", turn+1, strings.TrimRight(p.Content, "\n"))
		case TypeCognitionOut:
			var p CognitionOut
			_ = ev.Decode(&p)
			turn = max(turn+1, p.Turn)
			fmt.Fprintf(&b, "### Response — Turn %d\n\n", turn)
			if p.Content != "" {
				fmt.Fprintf(&b, "%s\n\n", strings.TrimRight(p.Content, "\n"))
			}
			for _, c := range p.ToolCalls {
				fmt.Fprintf(&b, "### Tool: %s\n\n%s\n", c.Name, fencedRef("json", string(c.Input)))
			}
		case TypeToolCallResult:
			var p ToolCallResult
			_ = ev.Decode(&p)
			title := "### Result"
			if p.IsError {
				title = "### Error"
			}
			fmt.Fprintf(&b, "%s: %s\n\n%s\n", title, p.Tool, fencedRef("", p.Output))
		case TypeThreadHandoff:
			var p ThreadHandoff
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> handoff to `%s` (%d trailing turns)\n\n", p.NewThreadID, p.TrailingTurns)
		case TypeThreadContinued:
			var p ThreadContinued
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> continues `%s`\n\n", p.PreviousThreadID)
		case TypeThreadResumed:
			var p ThreadResumed
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> resumed as `%s`\n\n", p.NewThreadID)
		case TypeChildSpawned:
			var p ChildSpawned
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> spawned child `%s` (%s)\n\n", p.ChildID, p.Directive)
		case TypeChildRefused:
			var p ChildRefused
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> **spawn refused** (%s) %s\n\n", p.Directive, p.Message)
		case TypeLimitExceeded:
			var p LimitExceeded
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> **limit** %s: %s of %s\n\n", p.Code, formatFloatRef(p.Current), formatFloatRef(p.Max))
		case TypeThreadError:
			var p Error
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> **error** %s\n\n", strings.TrimSpace(p.Class+" "+p.Message))
		case TypeThreadWaiting:
			var p ThreadWaiting
			_ = ev.Decode(&p)
			fmt.Fprintf(&b, "> waiting on %s\n\n", codeListRef(p.ChildIDs))
		case TypeHookFired:
			// Hooks that worked show in what they injected or wrote; a
			// failed one (a refused capability, a missing item) only here.
			var p HookFired
			_ = ev.Decode(&p)
			if p.Error != "" {
				fmt.Fprintf(&b, "> **hook error** `%s` (%s): %s\n\n", p.HookID, p.Event, p.Error)
			}
		case TypeThreadCancelled:
			var p ThreadCancelled
			_ = ev.Decode(&p)
			b.WriteString(strings.TrimSpace("> **cancelled** "+p.Reason) + "\n\n")
		case TypeThreadCompleted:
			var p ThreadCompleted
			_ = ev.Decode(&p)
			if p.Status == "" || p.Status == "completed" {
				b.WriteString("## Completed\n\n")
			} else {
				fmt.Fprintf(&b, "## Ended: %s\n\n", p.Status)
			}
			if p.Error != nil {
				fmt.Fprintf(&b, "> **error** %s\n\n", strings.TrimSpace(p.Error.Code+" "+p.Error.Message))
			}
			if p.Result != "" {
				fmt.Fprintf(&b, "%s\n\n", strings.TrimRight(p.Result, "\n"))
			}
			if len(p.Outputs) > 0 {
				ks := make([]string, 0, len(p.Outputs))
				for k := range p.Outputs {
					ks = append(ks, k)
				}
				sort.Strings(ks)
				for _, k := range ks {
					fmt.Fprintf(&b, "- `%s`: %s\n", k, p.Outputs[k])
				}
				b.WriteString("\n")
			}
		}
	}
	return b.Bytes()
}

func codeListRef(ids []string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = "`" + id + "`"
	}
	return strings.Join(quoted, ", ")
}

func formatFloatRef(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// signedKnowledgeRef is renderKnowledgeRef signed with SignMarkdown.
func signedKnowledgeRef(meta KnowledgeMeta, events []Event, signer *Signer, now time.Time) []byte {
	return signMarkdownRef(renderKnowledgeRef(meta, events), signer, now)
}

// renderCapabilitiesRef renders capabilities.md: the thread's tool
// definitions in a JSON fenced block and its capabilities tree in a code
// fence. Sign it with SignMarkdown; ReadCapabilities reads it back.
func renderCapabilitiesRef(threadID string, tools []thread.ToolDef, capabilities []string) ([]byte, error) {
	toolsJSON, err := json.MarshalIndent(tools, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render capabilities: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s## Tools\n\n%s\n", capabilitiesTitleRef(threadID), fencedRef("json", string(toolsJSON)))
	b.WriteString(capabilitiesSectionRef(capabilities))
	return b.Bytes(), nil
}

func capabilitiesTitleRef(threadID string) string { return "# Capabilities: " + threadID + "\n\n" }

// capabilitiesSectionRef is the end of capabilities.md: the heading and the
// fenced tree of the capabilities, in any order.
func capabilitiesSectionRef(capabilities []string) string {
	caps := append([]string(nil), capabilities...)
	sort.Strings(caps)
	return "## Capabilities\n\n" + fencedRef("", capabilityTreeRef(caps))
}

// capabilityTreeRef draws "rye.execute.tool.x" strings as an indented tree.
func capabilityTreeRef(caps []string) string {
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

// signMarkdownRef prefixes body with a rye signature line. A signature line
// already at the top of body is replaced.
func signMarkdownRef(body []byte, signer *Signer, now time.Time) []byte {
	if _, rest, ok := splitSigLine(body); ok {
		body = rest
	}
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	sig := b64.EncodeToString(signer.Sign([]byte(h)))
	line := fmt.Sprintf("<!-- rye:signed:%s:%s:%s:%s -->\n", now.UTC().Format(time.RFC3339), h, sig, signer.KeyID())
	return append([]byte(line), body...)
}
