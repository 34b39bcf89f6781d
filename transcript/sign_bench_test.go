package transcript

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// The CPU this package spends for a thread: thread.json (SignJSON and
// VerifyJSON, under each canonicalization VerifyJSON reads), the knowledge
// render, capabilities.md and the checkpoint (checkpoint_agree_test.go,
// whose "old" side is the reference in checkpoint_ref_test.go):
//
//	go test -run '^$' -bench 'JSON|Knowledge|Capabilities|Checkpoint' -benchmem -count 5 ./transcript/

// benchRecord is thread.json of a finished one-turn thread, as the
// orchestrator signs it (registry.Record has its own MarshalJSON).
func benchRecord() *registry.Record {
	created := time.Date(2026, 2, 17, 10, 0, 0, 123456789, time.UTC)
	return &registry.Record{
		ThreadID: "agency-kiwi/discover_leads-1739820456", Directive: "agency-kiwi/discover_leads", Status: thread.StatusCompleted,
		ChainRootID: "agency-kiwi/discover_leads-1739820456",
		Result:      "Found 12 leads in Austin, TX.\nWrote them to .ai/data/leads.json (\"dentists\" <> \"orthodontists\" & co).",
		Outputs:     map[string]any{"leads_file": ".ai/data/leads.json", "count": 12, "cities": []any{"Austin", "Round Rock"}, "html": "<b>&</b>"},
		Cost:        thread.Cost{Turns: 1, InputTokens: 3200, OutputTokens: 800, CacheReadTokens: 1024, Spend: 0.0213, ElapsedSeconds: 4.25},
		Limits:      thread.Resolved{Turns: 25, Tokens: 200000, Spend: 1.0, Depth: 10, Spawns: 10, Duration: 600},
		Model:       "claude-3-5-haiku-20241022",
		Capabilities: []string{"rye.execute.tool.scraping.gmaps.scrape_gmaps", "rye.execute.tool.rye.file-system.*",
			"rye.load.knowledge.agency-kiwi.*", "rye.execute.tool.rye.agent.threads.thread_directive"},
		Bundle:    "sha256:9f2c4e0b7d1a3c5e8f6b2d4a0c9e7f1b3d5a7c9e1f3b5d7a9c1e3f5b7d9a1c3e",
		Inputs:    map[string]any{"city": "Austin, TX", "niche": "dentists", "max_results": 25, "notes": "skip chains; ünïcode ✓"},
		Queue:     "default",
		Ancestors: []string{"agency-kiwi/campaign-1739820000"},
		Depth:     1,
		CreatedAt: created, UpdatedAt: created.Add(4250 * time.Millisecond), StartedAt: created.Add(15 * time.Millisecond),
		Version: 7, Activation: 1,
		Transcript: registry.TranscriptMark{Segments: 1, ChainHash: "3b4c2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"},
	}
}

// benchLargeRecord is benchRecord with a 16 KiB result and 64 outputs:
// the larger end of what thread.json holds.
func benchLargeRecord() *registry.Record {
	r := benchRecord()
	r.Result = strings.Repeat("Lakeway Dental, +1 512-555-0199, rating 4.5 <b>&</b> ünïcode ✓\n", 16<<10/64)
	r.Outputs = map[string]any{}
	for i := range 64 {
		r.Outputs[fmt.Sprintf("lead_%02d", i)] = map[string]any{"name": fmt.Sprintf("Dental %d", i), "rating": 4.5, "reviews": 100 + i}
	}
	return r
}

// jsonImpls are the canonicalizations VerifyJSON reads, side by side:
// RFC 8785 (what SignJSON signs) and the one before it (CanonLegacy,
// signed here as spool signed it).
var jsonImpls = []struct {
	name   string
	sign   func(any, *Signer) ([]byte, error)
	verify func([]byte, *Keyring, any) (JSONSignature, error)
}{
	{"canon=legacy", signJSONRef, VerifyJSON},
	{"canon=jcs", SignJSON, VerifyJSON},
}

// BenchmarkSignVerifyJSON is one signed thread.json: signed, then
// verified and decoded, as a writer and a reader of it do.
func BenchmarkSignVerifyJSON(b *testing.B) {
	s := fixedSigner()
	ring := NewKeyring(s.PublicKey())
	for _, size := range []struct {
		name string
		rec  *registry.Record
	}{{"size=typical", benchRecord()}, {"size=large", benchLargeRecord()}} {
		for _, impl := range jsonImpls {
			b.Run(size.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				data, err := impl.sign(size.rec, s)
				require.NoError(b, err)
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					data, err := impl.sign(size.rec, s)
					require.NoError(b, err)
					var rec registry.Record
					_, err = impl.verify(data, ring, &rec)
					require.NoError(b, err)
				}
			})
		}
	}
}

func BenchmarkSignJSON(b *testing.B) {
	s := fixedSigner()
	rec := benchRecord()
	for _, impl := range jsonImpls {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, err := impl.sign(rec, s)
				require.NoError(b, err)
			}
		})
	}
}

func BenchmarkVerifyJSON(b *testing.B) {
	s := fixedSigner()
	ring := NewKeyring(s.PublicKey())
	for _, impl := range jsonImpls {
		data, err := impl.sign(benchRecord(), s)
		require.NoError(b, err)
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var rec registry.Record
				_, err := impl.verify(data, ring, &rec)
				require.NoError(b, err)
			}
		})
	}
}

// benchEvents is the transcript of a one-turn thread that called one tool:
// what the worker renders at the end.
func benchEvents(tb testing.TB) []Event {
	tb.Helper()
	ts := time.Date(2026, 2, 17, 10, 0, 0, 0, time.UTC)
	var evs []Event
	add := func(typ string, p any) {
		raw, err := marshal(p)
		require.NoError(tb, err)
		evs = append(evs, Event{Timestamp: ts.Add(time.Duration(len(evs)) * time.Millisecond), ThreadID: "agency-kiwi/discover_leads-1739820456",
			Seq: int64(len(evs) + 1), Type: typ, Payload: raw})
	}
	limits := thread.DefaultLimits()
	add(TypeThreadStarted, ThreadStarted{Directive: "agency-kiwi/discover_leads", Model: "claude-3-5-haiku-20241022",
		Inputs: json.RawMessage(`{"city":"Austin, TX","niche":"dentists"}`), Limits: &limits,
		Capabilities: []string{"rye.execute.tool.scraping.gmaps.scrape_gmaps", "rye.execute.tool.rye.file-system.*"}, BundleDigest: "sha256:9f2c4e"})
	add(TypeHookFired, HookFired{HookID: "ctx", Event: "thread_started", Layer: 1, Action: "load", ItemType: "knowledge", ItemID: "agency-kiwi/style"})
	add(TypeCognitionIn, CognitionIn{Content: "Find dentists in Austin, TX and write them to .ai/data/leads.json.\n\nUse the gmaps scraper; at most 25 results.\nKeep ünïcode ✓ and `code` as is.\n"})
	for _, tok := range []string{"I'll ", "scrape ", "Google Maps."} {
		add(TypeTokenDelta, TokenDelta{Text: tok})
	}
	call := thread.ToolCall{ID: "toolu_01", Name: "scraping/gmaps/scrape_gmaps", Input: json.RawMessage(`{"query":"dentists in Austin, TX","max_results":25}`)}
	add(TypeCognitionOut, CognitionOut{Content: "I'll scrape Google Maps.", ToolCalls: []thread.ToolCall{call}, Model: "claude-3-5-haiku-20241022",
		Usage: Usage{InputTokens: 1800, OutputTokens: 120}, Spend: 0.0021, Turn: 1, StopReason: "tool_use"})
	add(TypeToolCallStart, ToolCallStart{CallID: call.ID, Tool: call.Name, Input: call.Input})
	out := `[{"name":"Bright Smiles Dental","phone":"+1 512-555-0101","rating":4.8},{"name":"Austin Family Dentistry","phone":"+1 512-555-0102","rating":4.6}]` + "\n"
	for len(out) < 2000 {
		out += `{"name":"Lakeway Dental ` + "```" + `","phone":"+1 512-555-0199","rating":4.5}` + "\n"
	}
	add(TypeToolCallResult, ToolCallResult{CallID: call.ID, Tool: call.Name, Output: out})
	add(TypeCognitionOut, CognitionOut{Content: "Found 12 leads; wrote them to .ai/data/leads.json.", Model: "claude-3-5-haiku-20241022",
		Usage: Usage{InputTokens: 2600, OutputTokens: 80}, Spend: 0.0028, Turn: 1, StopReason: "end_turn"})
	add(TypeThreadCompleted, ThreadCompleted{Status: "completed", Result: "Found 12 leads in Austin, TX.",
		Outputs: map[string]string{"leads_file": ".ai/data/leads.json", "count": "12"}, Cost: thread.Cost{Turns: 1, Spend: 0.0049}})
	return evs
}

func benchKnowledgeMeta() KnowledgeMeta {
	created := time.Date(2026, 2, 17, 10, 0, 0, 0, time.UTC)
	return KnowledgeMeta{ThreadID: "agency-kiwi/discover_leads-1739820456", Directive: "agency-kiwi/discover_leads", Status: "completed",
		Model: "claude-3-5-haiku-20241022", Turns: 1, Spend: 0.0049, CreatedAt: created, UpdatedAt: created.Add(4 * time.Second)}
}

func BenchmarkSignedKnowledge(b *testing.B) {
	s := fixedSigner()
	meta, events := benchKnowledgeMeta(), benchEvents(b)
	now := time.Date(2026, 2, 17, 10, 0, 5, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		SignedKnowledge(meta, events, s, now)
	}
}

// benchToolDefs are the tools of a thread with the file-system and a
// scraper, plus the orchestration tools a worker adds.
func benchToolDefs() []thread.ToolDef {
	return []thread.ToolDef{
		{Name: "scraping/gmaps/scrape_gmaps", Description: "Scrape Google Maps for businesses matching a query; returns JSON lines.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"what to search"},"max_results":{"type":"integer","minimum":1,"maximum":100}},"required":["query"]}`)},
		{Name: "rye/file-system/fs_write", Description: "Write a file in the thread's workspace (creates directories).",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`)},
		{Name: "rye/file-system/fs_read", Description: "Read a file <= 1 MiB & return its text.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		{Name: "rye/agent/threads/thread_directive", Description: "Run a directive as a child thread; async returns its id at once.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"directive":{"type":"string"},"inputs":{"type":"object"},"async":{"type":"boolean"}},"required":["directive"]}`)},
		{Name: "directive_return", Description: "Finish the thread with its outputs.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"leads_file":{"type":"string"},"count":{"type":"string"}}}`)},
	}
}

var benchCapabilities = []string{"rye.execute.tool.scraping.gmaps.scrape_gmaps", "rye.execute.tool.rye.file-system.*",
	"rye.load.knowledge.agency-kiwi.*", "rye.execute.tool.rye.agent.threads.thread_directive"}

func BenchmarkSignedCapabilities(b *testing.B) {
	s := fixedSigner()
	tools := benchToolDefs()
	now := time.Date(2026, 2, 17, 10, 0, 5, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		body, err := RenderCapabilities("agency-kiwi/discover_leads-1739820456", tools, benchCapabilities)
		require.NoError(b, err)
		SignMarkdown(body, s, now)
	}
}
