package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

// TestAppendEventAgrees: appendEvent writes the line marshal writes for
// the Event, and fails where it fails.
func TestAppendEventAgrees(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	times := []time.Time{{}, time.Date(2026, 2, 17, 10, 0, 0, 123456789, time.UTC), time.Date(2026, 2, 17, 10, 0, 0, 0, time.FixedZone("x", -5*3600-30*60)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)), time.Unix(1739820456, 1).UTC()}
	ids := []string{"", "t/x-1", "agency-kiwi/discover_leads-1739820456", "q\"\\<&>\u2028\u2029\xff\x01\tü"}
	types := []string{TypeCheckpoint, TypeCognitionIn, "", "<&>\"\n"}
	payloads := [][]byte{nil, []byte("null"), []byte("{}"), []byte(`{"a":"<&>\u2028","b":[1,2.5e-7]}`)}
	for range 2000 {
		v := genPayload(rng, 1)
		if raw, err := marshal(v); err == nil {
			payloads = append(payloads, raw)
		}
	}
	for _, p := range payloads {
		ts, id, typ := times[rng.IntN(len(times))], ids[rng.IntN(len(ids))], types[rng.IntN(len(types))]
		seq := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, rng.Int64()}[rng.IntN(6)]
		want, werr := marshal(Event{Timestamp: ts, ThreadID: id, Seq: seq, Type: typ, Payload: p})
		got, gerr := appendEvent([]byte("prefix"), ts, id, seq, typ, p)
		if (werr == nil) != (gerr == nil) || werr == nil && !bytes.Equal(want, got[len("prefix"):]) {
			t.Fatalf("appendEvent(%v, %q, %d, %q, %q):\n got %q, %v\nwant %q, %v", ts, id, seq, typ, p, got, gerr, want, werr)
		}
	}
}

// TestWriterAgreesWithReference: the Writer stores the segments, byte for
// byte, that it stored when every line went through marshal.
func TestWriterAgreesWithReference(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fixedSigner()
	open := func() (*Writer, blobstore.Store) {
		store := blobstore.NewMemory()
		w, err := WriterConfig{Now: newClock().Now, DeltaBudget: 64, DeltaChunk: 16}.Create("t/agree-1", store, s)
		require.NoError(t, err)
		return w, store
	}
	newW, newStore := open()
	refW, refStore := open()
	payloads := []any{nil, json.RawMessage(" { \"a\" : [ 1 , \"<&>\" ] } "), []byte(`"x"`), json.RawMessage(`{`), []byte(` `),
		CognitionIn{Content: "line\nwith \"quotes\" <&> \u2028 ünïcode"}, ToolCallResult{CallID: "c", Tool: "t", Output: "<b>&</b>", IsError: true},
		CognitionOut{Content: "x", ToolCalls: []thread.ToolCall{{ID: "1", Name: "n", Input: json.RawMessage(` {"k": "v"} `)}}, Turn: 2},
		map[string]any{"z": 1, "a": []any{"\xff", nil}}, math.NaN(), 42, "s"}
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 200 {
		switch op := rng.IntN(10); {
		case op < 6:
			typ := []string{TypeCognitionIn, TypeToolCallResult, TypeCheckpoint, "", TypeHookFired}[rng.IntN(5)]
			p := payloads[rng.IntN(len(payloads))]
			gotSeq, gerr := newW.Append(typ, p)
			wantSeq, werr := refW.appendRef(typ, p)
			require.Equal(t, wantSeq, gotSeq, "op %d: Append(%q, %#v) = %d, %v; want %d, %v", i, typ, p, gotSeq, gerr, wantSeq, werr)
			require.Equal(t, werr == nil, gerr == nil, "op %d: Append(%q, %#v) = %d, %v; want %d, %v", i, typ, p, gotSeq, gerr, wantSeq, werr)
		case op < 8:
			text := []string{"tok ", "<&>", "\u2028", "a longer piece of streamed text"}[rng.IntN(4)]
			got, want := newW.AppendDelta(text), refW.appendDeltaRef(text)
			require.Equal(t, want, got, "op %d: AppendDelta", i)
		default:
			st := stateFor(i)
			st.Extra["raw"] = json.RawMessage(` { "spaced" : true } `)
			got, gerr := newW.Checkpoint(ctx, st)
			want, werr := refW.checkpointRef(ctx, st)
			require.Equal(t, werr == nil, gerr == nil, "op %d: Checkpoint error %v, want %v", i, gerr, werr)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("op %d: Checkpoint (-want +got):\n%s", i, diff)
			}
		}
	}
	_, err := newW.Checkpoint(ctx, State{})
	require.NoError(t, err)
	_, err = refW.checkpointRef(ctx, State{})
	require.NoError(t, err)
	want, got := snapshot(t, refStore, ""), snapshot(t, newStore, "")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("stored segments (-want +got):\n%s", diff)
	}
	require.GreaterOrEqual(t, len(got), 10, "only")
	_, err = Read(ctx, newStore, "t/agree-1", NewKeyring(s.PublicKey()), Strict)
	require.NoError(t, err)
}

func BenchmarkWriterCheckpoint(b *testing.B) {
	ctx := context.Background()
	s := fixedSigner()
	for _, impl := range []struct {
		name       string
		append     func(w *Writer, typ string, payload any) (int64, error)
		checkpoint func(w *Writer, ctx context.Context, st State) (SegmentInfo, error)
	}{
		{"impl=old", (*Writer).appendRef, (*Writer).checkpointRef},
		{"impl=new", (*Writer).Append, (*Writer).Checkpoint},
	} {
		// One turn: the events of benchEvents but the thread's first and
		// last, then the checkpoint. Only the checkpoint is timed.
		b.Run("op=checkpoint/"+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			w, err := CreateWriter("agency-kiwi/discover_leads-1739820456", blobstore.NewMemory(), s)
			require.NoError(b, err)
			events := benchEvents(b)
			st := stateFor(1)
			for b.Loop() {
				b.StopTimer()
				for _, ev := range events[1 : len(events)-1] {
					_, err := impl.append(w, ev.Type, ev.Payload)
					require.NoError(b, err)
				}
				b.StartTimer()
				_, err := impl.checkpoint(w, ctx, st)
				require.NoError(b, err)
			}
		})
		b.Run("op=turn/"+impl.name, func(b *testing.B) { // the same, all timed, payloads as structs
			b.ReportAllocs()
			w, err := CreateWriter("agency-kiwi/discover_leads-1739820456", blobstore.NewMemory(), s)
			require.NoError(b, err)
			st := stateFor(1)
			call := thread.ToolCall{ID: "toolu_01", Name: "scraping/gmaps/scrape_gmaps", Input: json.RawMessage(`{"query":"dentists in Austin, TX","max_results":25}`)}
			out := string(bytes.Repeat([]byte(`{"name":"Lakeway Dental","phone":"+1 512-555-0199","rating":4.5}`+"\n"), 30))
			for b.Loop() {
				for _, p := range []struct {
					typ     string
					payload any
				}{
					{TypeCognitionIn, CognitionIn{Content: "Find dentists in Austin, TX and write them to .ai/data/leads.json.\n"}},
					{TypeCognitionOut, CognitionOut{Content: "I'll scrape Google Maps.", ToolCalls: []thread.ToolCall{call}, Model: "claude-3-5-haiku-20241022",
						Usage: Usage{InputTokens: 1800, OutputTokens: 120}, Spend: 0.0021, Turn: 1, StopReason: "tool_use"}},
					{TypeToolCallStart, ToolCallStart{CallID: call.ID, Tool: call.Name, Input: call.Input}},
					{TypeToolCallResult, ToolCallResult{CallID: call.ID, Tool: call.Name, Output: out}},
				} {
					_, err := impl.append(w, p.typ, p.payload)
					require.NoError(b, err)
				}
				_, err := impl.checkpoint(w, ctx, st)
				require.NoError(b, err)
			}
		})
	}
}

func BenchmarkSignCheckpoint(b *testing.B) {
	s := fixedSigner()
	ts := time.Date(2026, 2, 17, 10, 0, 4, 250000000, time.UTC)
	cp := Checkpoint{Segment: 1, Events: 9, SHA256: "3b4c2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b", State: stateFor(1)}
	for _, impl := range []struct {
		name string
		sign func(time.Time, string, int64, Checkpoint, *Signer) ([]byte, error)
	}{{"impl=old", signCheckpointRef}, {"impl=new", signCheckpoint}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, err := impl.sign(ts, "agency-kiwi/discover_leads-1739820456", 10, cp, s)
				require.NoError(b, err)
			}
		})
	}
}

// genPayload makes a payload value: maps whose keys marshal may encode
// alike (invalid UTF-8 becomes U+FFFD), strings with what marshal
// escapes, numbers, booleans, nulls and lists.
func genPayload(rng *rand.Rand, depth int) any {
	k := rng.IntN(8)
	if depth > 3 && k >= 5 {
		k = rng.IntN(5)
	}
	str := func() string {
		var sb strings.Builder
		for j := rng.IntN(3); j >= 0; j-- {
			sb.WriteString([]string{"a", "<&>", "\u2028", "\xff", "\xfe", "\ufffd", "é", "\n\t\x01", `"\`, "_signature", "Z"}[rng.IntN(11)])
		}
		return sb.String()
	}
	switch k {
	case 0:
		return str()
	case 1:
		return json.Number([]string{"0", "-0", "1.50", "1e3", "2.5e-7", "12345678901234567890"}[rng.IntN(6)])
	case 2:
		return rng.Float64() * 1e9
	case 3:
		return rng.IntN(2) == 0
	case 4:
		return nil
	case 5:
		a := make([]any, rng.IntN(4))
		for j := range a {
			a[j] = genPayload(rng, depth+1)
		}
		return a
	default:
		m := map[string]any{}
		for j := rng.IntN(6); j > 0; j-- {
			m[str()] = genPayload(rng, depth+1)
		}
		return m
	}
}
