package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spool-run/spool/thread"
)

// The renders and SignMarkdown write the bytes the reference versions in
// render_ref_test.go wrote, for any events: payloads as the Writer writes
// them (read without reflection) and anything else (read by encoding/json).

var renderAgreeNow = time.Date(2026, 4, 1, 5, 6, 44, 0, time.UTC)

func checkKnowledgeAgrees(t *testing.T, meta KnowledgeMeta, events []Event) {
	t.Helper()
	want, got := renderKnowledgeRef(meta, events), RenderKnowledge(meta, events)
	if !bytes.Equal(want, got) {
		t.Fatalf("RenderKnowledge of %s\n(-want +got):\n%s", describeEvents(events), cmp.Diff(string(want), string(got)))
	}
	s := fixedSigner()
	if want, got := signedKnowledgeRef(meta, events, s, renderAgreeNow), SignedKnowledge(meta, events, s, renderAgreeNow); !bytes.Equal(want, got) {
		t.Fatalf("SignedKnowledge of %s\n(-want +got):\n%s", describeEvents(events), cmp.Diff(string(want), string(got)))
	}
}

func describeEvents(events []Event) string {
	var sb strings.Builder
	for _, ev := range events {
		fmt.Fprintf(&sb, "\n  %s %q", ev.Type, ev.Payload)
	}
	return sb.String()
}

// renderedTypes are the event types the knowledge render shows.
var renderedTypes = []string{TypeThreadStarted, TypeCognitionIn, TypeCognitionOut, TypeToolCallResult, TypeThreadHandoff,
	TypeThreadContinued, TypeThreadResumed, TypeChildSpawned, TypeChildRefused, TypeLimitExceeded, TypeThreadError, TypeThreadWaiting,
	TypeHookFired, TypeThreadCancelled, TypeThreadCompleted, TypeTokenDelta, TypeCheckpoint}

func TestRenderAgreesWithReference(t *testing.T) {
	t.Parallel()
	metas := []KnowledgeMeta{benchKnowledgeMeta(), {},
		{ThreadID: "t/<&>\u2028\xff", Directive: "d/\"q\"", Status: "error", Model: "m\n", Turns: -3, Spend: math.NaN(),
			CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))},
		{Spend: math.Inf(1)}, {Spend: 1e21}, {Spend: 1e-7}, {Spend: -0.000001}, {Spend: 123456789.125}}
	for _, meta := range metas {
		checkKnowledgeAgrees(t, meta, benchEvents(t))
	}
	s := newSetup(t)
	writeTranscript(t, s, 3)
	tr, err := Read(t.Context(), s.store, s.threadID, s.keyring, Strict)
	if err != nil {
		t.Fatal(err)
	}
	checkKnowledgeAgrees(t, benchKnowledgeMeta(), tr.Events)
	checkKnowledgeAgrees(t, benchKnowledgeMeta(), nil)

	// Every payload type, written as the Writer writes it.
	limits := thread.DefaultLimits()
	var evs []Event
	for _, p := range []struct {
		typ     string
		payload any
	}{
		{TypeThreadStarted, ThreadStarted{Directive: "d", Limits: &limits, Inputs: json.RawMessage(`{"a":[1,{"b":null}]}`)}},
		{TypeCognitionOut, CognitionOut{ToolCalls: []thread.ToolCall{{ID: "1", Name: "n"}, {Name: "m", Input: json.RawMessage(`{"x":"` + "````" + `"}`)}}, Turn: 7}},
		{TypeCognitionOut, CognitionOut{Content: "```go\n```\n\n", ToolCalls: []thread.ToolCall{}, Turn: 2}},
		{TypeToolCallResult, ToolCallResult{Tool: "t", Output: "", IsError: true}},
		{TypeToolCallResult, ToolCallResult{Tool: "t", Output: strings.Repeat("`", 40) + "\n"}},
		{TypeThreadHandoff, ThreadHandoff{NewThreadID: "t/2", TrailingTurns: 4}},
		{TypeThreadContinued, ThreadContinued{PreviousThreadID: "t/0"}},
		{TypeThreadResumed, ThreadResumed{NewThreadID: "t/3"}},
		{TypeChildSpawned, ChildSpawned{ChildID: "c", Directive: "d"}},
		{TypeChildRefused, ChildRefused{Directive: "d", Code: "spend_exceeded", Message: "spend_exceeded: no room"}},
		{TypeLimitExceeded, LimitExceeded{Code: "spend_exceeded", Current: 0.10000000000000002, Max: 1e-7}},
		{TypeThreadError, Error{Class: "transient", Message: "boom"}},
		{TypeThreadWaiting, ThreadWaiting{ChildIDs: []string{"a", "b"}}},
		{TypeHookFired, HookFired{HookID: "h", Event: "e", Error: "refused"}},
		{TypeThreadCancelled, ThreadCancelled{Reason: "  \n"}},
		{TypeThreadCompleted, ThreadCompleted{Status: "error", Error: &Error{Code: "c", Message: "m"}, Outputs: map[string]string{"b": "2", "a": "1"}}},
		{TypeThreadCompleted, ThreadCompleted{Status: "continued", Outputs: map[string]string{}}},
	} {
		raw, err := marshal(p.payload)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, Event{Type: p.typ, Payload: raw})
	}
	checkKnowledgeAgrees(t, benchKnowledgeMeta(), evs)
}

// TestRenderAgreesRandom changes the payloads of a transcript the ways
// that take them off the fast path (names spelled otherwise, repeated,
// escaped or unknown; null and mistyped values; legacy names; invalid
// JSON; whitespace) and the ways that keep them on it (strings with
// escapes, invalid UTF-8, backtick runs), and checks each render against
// the reference.
func TestRenderAgreesRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	base := benchEvents(t)
	n := 3000
	if testing.Short() || raceEnabled {
		n = 300
	}
	for i := 0; i < n; i++ {
		evs := make([]Event, len(base))
		copy(evs, base)
		for j := rng.IntN(3); j >= 0; j-- {
			k := rng.IntN(len(evs))
			evs[k].Payload = mutatePayload(rng, evs[k].Payload)
			if rng.IntN(8) == 0 {
				evs[k].Type = renderedTypes[rng.IntN(len(renderedTypes))]
			}
		}
		checkKnowledgeAgrees(t, benchKnowledgeMeta(), evs)
	}
}

var (
	mutationNames = []string{"content", "Content", "CONTENT", "tool_calls", "turn", "Turn", "tool", "output", "is_error",
		"directive", "model", "status", "result", "outputs", "error", "message", "class", "classification", "hook_id",
		"event", "name", "input", "id", `con\u0074ent`, "unknown", "child_thread_id", "limit_code", "current_value"}
	mutationValues = []string{`null`, `""`, `"x"`, `"a\nb\u2028\ud800` + "\xff" + "`````" + `"`, `1`, `1.0`, `1e2`, `-7`,
		`12345678901`, `true`, `false`, `[]`, `{}`, `[{"name":"n","input":{"a":1}}]`, `[{"name":"n","input":null}]`,
		`[{"Name":"n"}]`, `[1]`, `{"k":"v","k":"w","\u006b":"z"}`, `{"k":1}`, `{"message":"m","code":"c"}`, `{"error":"legacy"}`}
)

func mutatePayload(rng *rand.Rand, p json.RawMessage) json.RawMessage {
	s := string(p)
	switch rng.IntN(9) {
	case 0, 1: // set a member
		member := `"` + mutationNames[rng.IntN(len(mutationNames))] + `":` + mutationValues[rng.IntN(len(mutationValues))]
		if s == "{}" {
			return json.RawMessage("{" + member + "}")
		}
		if rng.IntN(2) == 0 {
			return json.RawMessage("{" + member + "," + s[1:])
		}
		return json.RawMessage(s[:len(s)-1] + "," + member + "}")
	case 2: // respell a name
		name := mutationNames[rng.IntN(len(mutationNames))]
		return json.RawMessage(strings.Replace(s, `"`+strings.ToLower(name)+`"`, `"`+strings.ToUpper(name[:1])+name[1:]+`"`, 1))
	case 3: // whitespace
		return json.RawMessage(strings.ReplaceAll(strings.Replace(s, ":", " :\n ", 2), ",", " , "))
	case 4: // cut
		return p[:rng.IntN(len(p)+1)]
	case 5: // a byte
		b := []byte(s)
		if len(b) > 0 {
			const junk = "{}[]\",:\\ 0n\xff`"
			b[rng.IntN(len(b))] = junk[rng.IntN(len(junk))]
		}
		return b
	case 6: // escapes in a string value
		return json.RawMessage(strings.Replace(s, `":"`, `":"\"\\\/\b\f\n\r\t\u0041\u00e9\ud83d\ude00`, 1))
	case 7: // trailing data
		return json.RawMessage(s + []string{" ", "\n", " {}", "x"}[rng.IntN(4)])
	default: // a whole other payload
		return json.RawMessage(mutationValues[rng.IntN(len(mutationValues))])
	}
}

// FuzzRenderAgrees: one event of any type with any payload renders as the
// reference renders it.
//
//	go test -run '^$' -fuzz FuzzRenderAgrees ./transcript/
func FuzzRenderAgrees(f *testing.F) {
	for _, ev := range benchEvents(f) {
		f.Add(uint8(0), []byte(ev.Payload))
	}
	for i, v := range mutationValues {
		f.Add(uint8(i), []byte(v))
	}
	f.Fuzz(func(t *testing.T, typ uint8, payload []byte) {
		checkKnowledgeAgrees(t, KnowledgeMeta{}, []Event{{Type: renderedTypes[int(typ)%len(renderedTypes)], Payload: payload}})
	})
}

// TestPayloadNames: the fast path's name lists are the payload structs'
// JSON names (a missing one would only send payloads to encoding/json; an
// extra one would read a name encoding/json ignores).
func TestPayloadNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v     any
		names []string
	}{
		{ThreadStarted{}, threadStartedNames}, {CognitionIn{}, cognitionInNames}, {CognitionOut{}, cognitionOutNames},
		{thread.ToolCall{}, toolCallNames}, {ToolCallResult{}, toolCallResultNames}, {HookFired{}, hookFiredNames},
		{ThreadCompleted{}, threadCompletedNames},
	} {
		typ := reflect.TypeOf(tc.v)
		var want []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			want = append(want, name)
		}
		if diff := cmp.Diff(want, tc.names); diff != "" {
			t.Errorf("%s names (-want +got):\n%s", typ, diff)
		}
		if len(tc.names) > len(payloadReader{}.vals) {
			t.Errorf("%s: %d names, room for %d", typ, len(tc.names), len(payloadReader{}.vals))
		}
	}
}

func TestAppendFloatAgrees(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.99999e-7, 1e-7, 1e20, 1e21, 999999999999999999999, 5e-324,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-9, 1.5e-10, 123456789.125, math.NaN(), math.Inf(1), math.Inf(-1)}
	for range 10000 {
		vals = append(vals, math.Float64frombits(rng.Uint64()), rng.NormFloat64()*math.Pow(10, float64(rng.IntN(60)-30)))
	}
	for _, f := range vals {
		if want, got := formatFloatRef(f), formatFloat(f); want != got {
			t.Fatalf("formatFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

func checkCapabilitiesAgree(t *testing.T, threadID string, tools []thread.ToolDef, caps []string) {
	t.Helper()
	want, werr := renderCapabilitiesRef(threadID, tools, caps)
	got, gerr := RenderCapabilities(threadID, tools, caps)
	if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
		t.Fatalf("RenderCapabilities(%q, %q, %q): error %v, want %v\n(-want +got):\n%s", threadID, tools, caps, gerr, werr, cmp.Diff(string(want), string(got)))
	}
	s := fixedSigner()
	if want, got := signMarkdownRef(want, s, renderAgreeNow), SignMarkdown(got, s, renderAgreeNow); !bytes.Equal(want, got) {
		t.Fatalf("SignMarkdown:\n got %q\nwant %q", got, want)
	}
}

var schemaSeeds = []string{`{"type":"object"}`, ` { "type" : "object" , "properties" : { } , "required" : [ ] } `,
	`{"a":[1,-2.5e+3,true,false,null,"<&>` + "\u2028\u2029\xe2\x80" + `\u2028\/\"x"],"b":{"c":{"d":[[{}]]}}}`,
	`"just a string"`, `42`, `null`, `[]`, ``, ` `, `{`, `{"a":1}x`, `{"a":1} {}`, `{"a":01}`, "{\"a\":\"\x01\"}",
	`{"a":"` + "```" + `"}`, `{"a":"` + strings.Repeat("`", 12) + `"}`, "{\"k\":\"\xff\xfe\"}", `[1,]`, `{"a" 1}`}

func TestCapabilitiesAgreeWithReference(t *testing.T) {
	t.Parallel()
	checkCapabilitiesAgree(t, "agency-kiwi/discover_leads-1739820456", benchToolDefs(), benchCapabilities)
	checkCapabilitiesAgree(t, "t", nil, nil)
	checkCapabilitiesAgree(t, "t", []thread.ToolDef{}, []string{})
	checkCapabilitiesAgree(t, "t<&>", []thread.ToolDef{{Name: "<n>\u2028\xff", Description: "```\n\"q\"\t"}}, []string{"b.a", "a", "a.b.c", "a.b", "a.b"})
	for _, schema := range schemaSeeds {
		checkCapabilitiesAgree(t, "t", []thread.ToolDef{{Name: "x", InputSchema: json.RawMessage(schema)}}, nil)
	}
	// encoding/json's nesting limit counts from the top of the document:
	// the tools array and a tool's object are two levels. (Indenting
	// that deep writes ~100 MB.)
	if testing.Short() || raceEnabled {
		return
	}
	for _, depth := range []int{maxJSONDepth - 3, maxJSONDepth - 2, maxJSONDepth - 1, maxJSONDepth} {
		schema := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		checkCapabilitiesAgree(t, "t", []thread.ToolDef{{Name: "deep", InputSchema: json.RawMessage(schema)}}, nil)
	}
}

// FuzzCapabilitiesAgree: any tool schema, name and description render as
// the reference (json.MarshalIndent) renders them, or fail as it does.
//
//	go test -run '^$' -fuzz FuzzCapabilitiesAgree ./transcript/
func FuzzCapabilitiesAgree(f *testing.F) {
	for _, s := range schemaSeeds {
		f.Add([]byte(s), "name", "desc")
	}
	f.Add([]byte(nil), "<&>", "\u2028`````")
	f.Fuzz(func(t *testing.T, schema []byte, name, desc string) {
		checkCapabilitiesAgree(t, "t", []thread.ToolDef{{Name: name, Description: desc, InputSchema: schema}, {Name: "n"}}, []string{name, desc})
	})
}

func TestSignMarkdownAgrees(t *testing.T) {
	t.Parallel()
	s := fixedSigner()
	for _, body := range []string{"", "x", "# T\n\nbody\n", "<!-- rye:signed:old -->\nbody", "<!-- rye:signed:old -->\r\nbody", "<!-- rye:signed:no newline"} {
		for _, now := range []time.Time{renderAgreeNow, {}, time.Date(12345, 1, 1, 0, 0, 0, 0, time.FixedZone("z", -7200))} {
			if want, got := signMarkdownRef([]byte(body), s, now), SignMarkdown([]byte(body), s, now); !bytes.Equal(want, got) {
				t.Fatalf("SignMarkdown(%q, %v):\n got %q\nwant %q", body, now, got, want)
			}
		}
	}
}
