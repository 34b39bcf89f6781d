package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func loadExample(t *testing.T) Provider {
	t.Helper()
	p, err := New("script:testdata/cli_example.yaml", Config{})
	require.NoError(t, err)
	return p
}

func TestScriptedCLIExample(t *testing.T) {
	t.Parallel()
	p := loadExample(t)
	require.Equal(t, 200000, p.ContextWindow("anything"))

	type step struct {
		turn      int
		wantText  string
		wantCalls []thread.ToolCall
		wantUsage *Usage
	}
	cases := []struct {
		name   string
		inputs map[string]any
		steps  []step
	}{
		{
			name:   "level 1 string input spawns level 2",
			inputs: map[string]any{"level": "1"},
			steps: []step{
				{turn: 1, wantCalls: []thread.ToolCall{{ID: "call_1_1", Name: "rye/file-system/fs_write",
					Input: json.RawMessage(`{"content":"level 1","path":"chain_L1.txt"}`)}}, wantUsage: &Usage{InputTokens: 120, OutputTokens: 30}},
				{turn: 2, wantCalls: []thread.ToolCall{{ID: "call_2_1", Name: "rye/agent/threads/thread_directive",
					Input: json.RawMessage(`{"directive_name":"test/chain_child","inputs":{"level":2}}`)}}},
				{turn: 3, wantText: "done at level 1"},
			},
		},
		{
			name:   "level 3 numeric input skips the spawn turn",
			inputs: map[string]any{"level": 3},
			steps: []step{
				{turn: 1, wantCalls: []thread.ToolCall{{ID: "call_1_1", Name: "rye/file-system/fs_write",
					Input: json.RawMessage(`{"content":"level 3","path":"chain_L3.txt"}`)}}},
				{turn: 2, wantText: "done at level 3"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range tc.steps {
				resp, err := p.Complete(context.Background(), &Request{
					Messages: []thread.Message{{Role: thread.RoleUser, Content: "run the chain child directive"}},
					Thread:   ThreadInfo{ID: "T1", Directive: "test/chain_child", Inputs: tc.inputs, Turn: s.turn},
				}, nil)
				require.NoError(t, err, "turn %d", s.turn)
				require.Equal(t, s.wantText, resp.Text, "turn %d", s.turn)
				if diff := cmp.Diff(s.wantCalls, resp.ToolCalls, cmp.Comparer(jsonEqual)); diff != "" {
					t.Fatalf("turn %d tool calls (-want +got):\n%s", s.turn, diff)
				}
				if s.wantUsage != nil {
					require.Equal(t, *s.wantUsage, resp.Usage)
				}
				if len(s.wantCalls) > 0 {
					require.Equal(t, "tool_use", resp.StopReason)
				} else {
					require.Equal(t, "end_turn", resp.StopReason)
				}
			}
		})
	}

	// Out of turns: a clear permanent error naming the script and turn.
	_, err := p.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "test/chain_child", Inputs: map[string]any{"level": 3}, Turn: 3}}, nil)
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassPermanent, pe.Class)
	require.Contains(t, err.Error(), `script "testdata/cli_example.yaml": directive "test/chain_child" has no turn 3`)

	// "*" catches every other directive.
	resp, err := p.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "other/thing", Turn: 1}}, nil)
	require.NoError(t, err)
	require.Equal(t, "ok", resp.Text)

	// Pricing from the script.
	c, err := p.Cost("", Usage{InputTokens: 1_000_000, OutputTokens: 200_000})
	require.NoError(t, err)
	require.InDelta(t, 2.0, c, 1e-9)
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(x, y)
}

func parse(t *testing.T, src string) *Scripted {
	t.Helper()
	s, err := ParseScript("t.yaml", []byte(src))
	require.NoError(t, err)
	return s
}

func TestScriptedTemplates(t *testing.T) {
	t.Parallel()
	s := parse(t, `
directives:
  demo/*:
    - text: "t={{.turn}} id={{.thread_id}} p={{.parent_id}} prev={{.previous_thread_id}} ci={{.chain_index}} last={{.last_tool_result}} sum={{add 2 (sub 10 4)}} {{mul .inputs.n 2}}"
      tool_calls:
        - tool: "rye/{{.inputs.kind}}/run"
          input:
            whole_int: "{{.inputs.n}}"
            mixed: "n={{.inputs.n}}"
            obj: "{{toJSON .inputs.obj}}"
            flag: "{{eq .inputs.kind \"x\"}}"
            list: ["{{.turn}}", "a{{.turn}}", 7]
            str_word: "{{.inputs.kind}}"
            plain: 5
        - tool: other
`)
	_, err := s.Complete(context.Background(), &Request{
		Messages: []thread.Message{
			{Role: thread.RoleUser, Content: "go"},
			{Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{{ID: "a", Name: "x", Input: json.RawMessage(`{}`)}}},
			{Role: thread.RoleTool, ToolCallID: "a", Content: "first"},
			{Role: thread.RoleTool, ToolCallID: "b", Content: "second"},
		},
		Thread: ThreadInfo{ID: "T", Directive: "demo/x", ParentID: "P", PreviousThreadID: "Q", ChainIndex: 2,
			Inputs: map[string]any{"n": "21", "kind": "x", "obj": map[string]any{"a": 1}}},
	}, nil)
	require.Error(t, err) // turn derived from messages = 2, only one entry
	require.Contains(t, err.Error(), `directive "demo/x" has no turn 2 (it has 1)`)
	require.NotContains(t, err.Error(), "went on after", "the last message was a tool result")

	// A thread that goes on after a message (here the reminder to call
	// directive_return) says which, as a likely reason for the turn.
	_, err = s.Complete(context.Background(), &Request{
		Messages: []thread.Message{
			{Role: thread.RoleUser, Content: "go"},
			{Role: thread.RoleAssistant, Content: "done"},
			{Role: thread.RoleUser, Content: "This directive declares outputs.\nFinish by calling rye/agent/threads/directive_return with them."},
		},
		Thread: ThreadInfo{ID: "T", Directive: "demo/x"},
	}, nil)
	require.ErrorContains(t, err, `directive "demo/x" has no turn 2 (it has 1); the thread went on after the message "This directive declares outputs. Finish by calling rye/agent/threads/directive_return with them."`)

	resp, err := s.Complete(context.Background(), &Request{
		Messages: []thread.Message{{Role: thread.RoleTool, ToolCallID: "b", Content: "second"}},
		Thread: ThreadInfo{ID: "T", Directive: "demo/x", ParentID: "P", PreviousThreadID: "Q", ChainIndex: 2, Turn: 1,
			Inputs: map[string]any{"n": "21", "kind": "x", "obj": map[string]any{"a": 1}}},
	}, nil)
	require.NoError(t, err)
	require.Equal(t, "t=1 id=T p=P prev=Q ci=2 last=second sum=8 42", resp.Text)
	require.Len(t, resp.ToolCalls, 2)
	require.Equal(t, "rye/x/run", resp.ToolCalls[0].Name)
	require.Equal(t, "call_1_1", resp.ToolCalls[0].ID)
	require.Equal(t, "call_1_2", resp.ToolCalls[1].ID)
	require.JSONEq(t, `{"whole_int":21,"mixed":"n=21","obj":{"a":1},"flag":true,"list":[1,"a1",7],"str_word":"x","plain":5}`,
		string(resp.ToolCalls[0].Input))
	require.JSONEq(t, `{}`, string(resp.ToolCalls[1].Input))
}

func TestScriptedWhenAndSelection(t *testing.T) {
	t.Parallel()
	s := parse(t, `
directives:
  "a/b":
    - text: one
    - text: only-odd
      when: '{{eq (atoi (printf "%d" .turn)) 2}}'
    - text: three
      when: "{{.inputs.missing}}"
    - text: last
  "a/*":
    - text: glob
  "*":
    - text: star
`)
	cases := []struct {
		dir  string
		turn int
		want string
		err  string
	}{
		{"a/b", 1, "one", ""},
		{"a/b", 2, "only-odd", ""},  // when true at turn 2
		{"a/b", 3, "", "no turn 3"}, // at turn 3 entry 2 is skipped and entry 3 is skipped: only 2 remain
		{"a/c", 1, "glob", ""},      // glob beats *
		{"z", 1, "star", ""},
		{"x/y/z", 1, "star", ""},
	}
	for _, tc := range cases {
		resp, err := s.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: tc.dir, Turn: tc.turn}}, nil)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, resp.Text, "%s turn %d", tc.dir, tc.turn)
	}

	// A `when` that renders neither true nor false is an error, not a guess.
	bad := parse(t, "directives:\n  x:\n    - text: a\n      when: 'maybe'\n")
	_, err := bad.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "x", Turn: 1}}, nil)
	require.ErrorContains(t, err, `renders "maybe"`)

	// No entry for the directive, and no "*".
	noStar := parse(t, "directives:\n  x:\n    - text: a\n")
	_, err = noStar.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "y", Turn: 1}}, nil)
	require.ErrorContains(t, err, `no entry for directive "y"`)
}

func TestScriptedUsageDefaults(t *testing.T) {
	t.Parallel()
	s := parse(t, `
directives:
  d:
    - text: "hello there, this is a response"
    - text: "x"
      usage: {input: 7}
    - tool_calls: [{tool: t, input: {a: "b"}}]
      usage: {output: 3}
`)
	msgs := []thread.Message{{Role: thread.RoleUser, Content: strings.Repeat("word ", 100)}}
	wantIn := 0
	for _, m := range msgs {
		wantIn += thread.EstimateMessageTokens(m)
	}
	resp, err := s.Complete(context.Background(), &Request{Messages: msgs, Thread: ThreadInfo{Directive: "d", Turn: 1}}, nil)
	require.NoError(t, err)
	require.Equal(t, Usage{InputTokens: wantIn, OutputTokens: thread.EstimateMessageTokens(thread.Message{Content: "hello there, this is a response"})}, resp.Usage)
	require.Greater(t, resp.Usage.InputTokens, 100)

	resp, err = s.Complete(context.Background(), &Request{Messages: msgs, Thread: ThreadInfo{Directive: "d", Turn: 2}}, nil)
	require.NoError(t, err)
	require.Equal(t, 7, resp.Usage.InputTokens)
	require.Equal(t, thread.EstimateMessageTokens(thread.Message{Content: "x"}), resp.Usage.OutputTokens)

	resp, err = s.Complete(context.Background(), &Request{Messages: msgs, Thread: ThreadInfo{Directive: "d", Turn: 3}}, nil)
	require.NoError(t, err)
	require.Equal(t, Usage{InputTokens: wantIn, OutputTokens: 3}, resp.Usage)
}

func TestScriptedStreamsText(t *testing.T) {
	t.Parallel()
	s := parse(t, "directives:\n  d:\n    - text: \"héllo wörld, a streamed answer\"\n")
	var got []string
	resp, err := s.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "d", Turn: 1}}, func(d string) { got = append(got, d) })
	require.NoError(t, err)
	require.Greater(t, len(got), 1)
	require.LessOrEqual(t, len(got), 4)
	require.Equal(t, resp.Text, strings.Join(got, ""))
}

func TestScriptedLatencyCancellation(t *testing.T) {
	t.Parallel()
	s := parse(t, "latency: 1h\ndirectives:\n  d:\n    - text: a\n")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Complete(ctx, &Request{Thread: ThreadInfo{Directive: "d", Turn: 1}}, nil)
		errc <- err
	}()
	cancel()
	err := <-errc
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassCancelled, pe.Class)
	require.True(t, errors.Is(err, context.Canceled))

	// A short latency still answers.
	fast := parse(t, "latency: 1ms\ndirectives:\n  d:\n    - text: a\n")
	resp, err := fast.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "d", Turn: 1}}, nil)
	require.NoError(t, err)
	require.Equal(t, "a", resp.Text)
}

func TestScriptedParseErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ src, want string }{
		"bad yaml":        {"directives: [", `script "bad.yaml"`},
		"unknown field":   {"directives:\n  d:\n    - txt: a\n", "line 3: unknown key txt (expected text, tool_calls, usage or when)"},
		"no directives":   {"context_window: 10\n", "no directives"},
		"empty turns":     {"directives:\n  d: []\n", `directive "d" has no turns`},
		"bad template":    {"directives:\n  d:\n    - text: '{{.x'\n", `directive "d" turn 1 text`},
		"bad input tmpl":  {"directives:\n  d:\n    - tool_calls: [{tool: t, input: {a: '{{'}}]\n", "tool_calls[0] input.a"},
		"bad latency":     {"latency: soon\ndirectives:\n  d:\n    - text: a\n", `latency "soon"`},
		"bad glob":        {"directives:\n  'a/[':\n    - text: a\n", `directive pattern "a/["`},
		"missing tool":    {"directives:\n  d:\n    - tool_calls: [{input: {}}]\n", "tool is required"},
		"int keys":        {"directives:\n  d:\n    - tool_calls: [{tool: t, input: {a: {1: x}}}]\n", "mapping keys must be strings"},
		"input not a map": {"directives:\n  d:\n    - tool_calls: [{tool: t, input: [1]}]\n", "input must be a mapping"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseScript("bad.yaml", []byte(tc.src))
			require.Error(t, err)
			require.Contains(t, err.Error(), `script "bad.yaml"`)
			require.Contains(t, err.Error(), tc.want)
		})
	}

	// Reading goes through Config.ReadFile (the worker reads from a bundle).
	_, err := New("script:missing.yaml", Config{ReadFile: func(p string) ([]byte, error) { return nil, os.ErrNotExist }})
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), `script "missing.yaml"`)
	p, err := New("script:bundle.yaml", Config{ReadFile: func(p string) ([]byte, error) {
		return []byte("directives:\n  '*':\n    - text: from bundle\n"), nil
	}})
	require.NoError(t, err)
	resp, err := p.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "x", Turn: 1}}, nil)
	require.NoError(t, err)
	require.Equal(t, "from bundle", resp.Text)
}

func TestScriptedTemplateRuntimeError(t *testing.T) {
	t.Parallel()
	s := parse(t, "directives:\n  d:\n    - text: '{{add .inputs.x 1}}'\n")
	_, err := s.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "d", Turn: 1, Inputs: map[string]any{"x": "abc"}}}, nil)
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, ClassPermanent, pe.Class)
	require.Contains(t, err.Error(), `"abc" is not a number`)
}

func TestScriptedConcurrentUse(t *testing.T) {
	t.Parallel()
	p := loadExample(t)
	done := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			_, err := p.Complete(context.Background(), &Request{Thread: ThreadInfo{Directive: "test/chain_child", Inputs: map[string]any{"level": 1}, Turn: 2}}, func(string) {})
			done <- err
		}()
	}
	for i := 0; i < 8; i++ {
		require.NoError(t, <-done)
	}
}

// FuzzParseScript: any input either fails to parse with an error naming the
// file, or yields a provider whose Complete never panics.
func FuzzParseScript(f *testing.F) {
	seed, _ := os.ReadFile("testdata/cli_example.yaml")
	f.Add(seed, "test/chain_child", 2)
	f.Add([]byte("directives:\n  '*':\n    - text: '{{.turn}}'\n      when: '{{lt .turn 3}}'\n"), "x", 1)
	f.Fuzz(func(t *testing.T, src []byte, directive string, turn int) {
		if bytes.Contains(src, []byte("range")) || bytes.Contains(src, []byte("printf")) {
			t.Skip("unbounded template work is the script author's business")
		}
		s, err := ParseScript("f.yaml", src)
		if err != nil {
			if !strings.Contains(err.Error(), `script "f.yaml"`) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond) // bounds a fuzzed latency
		defer cancel()
		_, err = s.Complete(ctx, &Request{Thread: ThreadInfo{Directive: directive, Turn: turn%50 + 1, Inputs: map[string]any{"level": "1"}}}, nil)
		var pe *Error
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

// TestScriptParsedOnce: activations of one script share one parse; a
// changed file is parsed anew.
func TestScriptParsedOnce(t *testing.T) {
	t.Parallel()
	files := map[string]string{"s.yaml": "directives:\n  \"*\":\n    - text: one\n"}
	read := func(p string) ([]byte, error) { return []byte(files[p]), nil }
	a, err := NewScripted("s.yaml", read)
	require.NoError(t, err)
	b, err := NewScripted("s.yaml", read)
	require.NoError(t, err)
	require.Same(t, a, b, "the same script was parsed twice")
	files["s.yaml"] = "directives:\n  \"*\":\n    - text: two\n"
	c, err := NewScripted("s.yaml", read)
	require.NoError(t, err)
	require.NotSame(t, a, c, "a changed script came from the cache")
	resp, err := c.Complete(t.Context(), &Request{Thread: ThreadInfo{Directive: "x", Turn: 1}}, nil)
	require.NoError(t, err)
	require.Equal(t, "two", resp.Text)
}

// TestScriptedToolResultFields: a script reads the fields of the previous
// turn's JSON tool results, as an async fan-out waits on the children it
// started.
func TestScriptedToolResultFields(t *testing.T) {
	t.Parallel()
	s := parse(t, `
directives:
  "*":
    - text: "one={{field \"thread_id\" .last_tool_result}} n={{len .tool_results}}"
      tool_calls:
        - tool: rye/agent/threads/orchestrator
          input: {operation: wait_threads, thread_ids: "{{toJSON (fields \"thread_id\" .tool_results)}}"}
`)
	resp, err := s.Complete(context.Background(), &Request{
		Messages: []thread.Message{
			{Role: thread.RoleUser, Content: "go"},
			{Role: thread.RoleTool, ToolCallID: "old", Content: `{"thread_id":"old-1"}`},
			{Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{{ID: "a"}, {ID: "b"}, {ID: "c"}}},
			{Role: thread.RoleTool, ToolCallID: "a", Content: `{"success":true,"thread_id":"k-1"}`},
			{Role: thread.RoleTool, ToolCallID: "b", Content: `{"success":false,"error":{"code":"spend_exceeded"}}`},
			{Role: thread.RoleTool, ToolCallID: "c", Content: `{"success":true,"thread_id":"k-3"}`},
		},
		Thread: ThreadInfo{ID: "T", Directive: "demo/x", Turn: 1},
	}, nil)
	require.NoError(t, err)
	require.Equal(t, "one=k-3 n=3", resp.Text)
	require.JSONEq(t, `{"operation":"wait_threads","thread_ids":["k-1","k-3"]}`, string(resp.ToolCalls[0].Input))

	bad := parse(t, "directives:\n  \"*\":\n    - text: '{{field \"x\" .last_tool_result}}'\n")
	_, err = bad.Complete(context.Background(), &Request{
		Messages: []thread.Message{{Role: thread.RoleTool, ToolCallID: "a", Content: "plain text"}},
		Thread:   ThreadInfo{ID: "T", Directive: "demo/x", Turn: 1},
	}, nil)
	require.ErrorContains(t, err, "not a JSON object")
}

func TestScriptedOfferedTools(t *testing.T) {
	t.Parallel()
	s := parse(t, "directives:\n  \"*\":\n    - text: '{{toJSON .tools}} {{len .tools}}'\n")
	resp, err := s.Complete(context.Background(), &Request{
		Tools:  []thread.ToolDef{{Name: "mcp/e/echo"}, {Name: "rye/file-system/fs_read"}, {Name: "mcp/e/add"}},
		Thread: ThreadInfo{ID: "T", Directive: "demo/x", Turn: 1},
	}, nil)
	require.NoError(t, err)
	require.Equal(t, `["mcp/e/add","mcp/e/echo","rye/file-system/fs_read"] 3`, resp.Text)
}
