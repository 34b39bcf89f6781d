package provider

import (
	"context"
	"testing"

	"github.com/spool-run/spool/thread"
)

// BenchmarkScriptedComplete measures one scripted turn with templates and a
// tool call (the provider side of the end-to-end throughput benchmark).
func BenchmarkScriptedComplete(b *testing.B) {
	p, err := New("script:testdata/cli_example.yaml", Config{})
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{
		Messages: []thread.Message{{Role: thread.RoleUser, Content: "run the chain child directive with some context"}},
		Thread:   ThreadInfo{ID: "T", Directive: "test/chain_child", Inputs: map[string]any{"level": "1"}, Turn: 2},
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Complete(ctx, req, func(string) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnthropicStream measures a streamed tool-use turn against a local
// httptest server (SDK + SSE decoding + accumulation overhead).
func BenchmarkAnthropicStream(b *testing.B) {
	f := newFakeAPI(&testing.T{}, sse(anthropicStream...))
	defer f.srv.Close()
	p, err := New("claude-sonnet-4-5", Config{AnthropicAPIKey: "k", AnthropicBaseURL: f.srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	req := toolRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Complete(ctx, req, func(string) {}); err != nil {
			b.Fatal(err)
		}
	}
}
