package transcript

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/thread"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// newClock is the setup's clock, one millisecond further at every reading.
func newClock() *testenv.Clock {
	return testenv.NewTickingClock(time.Date(2026, 2, 17, 10, 0, 0, 0, time.UTC), time.Millisecond)
}

type setup struct {
	store    blobstore.Store
	signer   *Signer
	keyring  *Keyring
	threadID string
	clock    *testenv.Clock
}

func newSetup(t testing.TB) *setup {
	t.Helper()
	s, err := GenerateKey()
	require.NoError(t, err)
	return &setup{store: blobstore.NewMemory(), signer: s, keyring: NewKeyring(s.PublicKey()),
		threadID: thread.NewID("test/transcript", time.Unix(1739820456, 0)), clock: newClock()}
}

// read reads the setup's thread's transcript in mode, which must succeed.
func (s *setup) read(t testing.TB, mode Mode) *Transcript {
	t.Helper()
	tr, err := Read(context.Background(), s.store, s.threadID, s.keyring, mode)
	require.NoError(t, err)
	return tr
}

func (s *setup) writer(t testing.TB) *Writer {
	t.Helper()
	w, err := WriterConfig{Now: s.clock.Now}.Open(context.Background(), s.store, s.threadID, s.signer, s.keyring)
	require.NoError(t, err)
	return w
}

func mustAppend(t testing.TB, w *Writer, typ string, payload any) {
	t.Helper()
	_, err := w.Append(typ, payload)
	require.NoError(t, err)
}

// writeTurn appends one model turn: user input, streamed answer with a tool
// call, the tool's result; then checkpoints. It returns the messages the
// turn should reconstruct to.
func writeTurn(t testing.TB, w *Writer, turn int) []thread.Message {
	t.Helper()
	callID := fmt.Sprintf("call_%d", turn)
	input := json.RawMessage(fmt.Sprintf(`{"path":"out_%d.txt","content":"line\nwith \"quotes\" <&>"}`, turn))
	user := fmt.Sprintf("Turn %d: please write the file.\nSecond line ünïcode ✓", turn)
	answer := fmt.Sprintf("Writing out_%d.txt now.", turn)
	mustAppend(t, w, TypeCognitionIn, CognitionIn{Content: user})
	for _, tok := range []string{"Writing ", "out_", "now."} {
		w.AppendDelta(tok)
	}
	call := thread.ToolCall{ID: callID, Name: "rye/file-system/fs_write", Input: input}
	mustAppend(t, w, TypeCognitionOut, CognitionOut{Content: answer, ToolCalls: []thread.ToolCall{call},
		Model: "scripted", Usage: Usage{InputTokens: 100 * turn, OutputTokens: 20}, Spend: 0.001, Turn: turn})
	mustAppend(t, w, TypeToolCallStart, ToolCallStart{CallID: callID, Tool: call.Name, Input: input})
	out := fmt.Sprintf("wrote %d bytes", 10+turn)
	isErr := turn%3 == 0
	mustAppend(t, w, TypeToolCallResult, ToolCallResult{CallID: callID, Tool: call.Name, Output: out, IsError: isErr})
	w.Attest(ArtifactThreadJSON, attestedView(turn)) // checkpoints attest what was written with them
	_, err := w.Checkpoint(context.Background(), stateFor(turn))
	require.NoError(t, err)
	return []thread.Message{
		{Role: thread.RoleUser, Content: user},
		{Role: thread.RoleAssistant, Content: answer, ToolCalls: []thread.ToolCall{call}},
		{Role: thread.RoleTool, Content: out, ToolCallID: callID, ToolName: call.Name, IsError: isErr},
	}
}

// attestedView is the thread.json writeTurn has turn's checkpoint attest.
func attestedView(turn int) []byte { return fmt.Appendf(nil, `{"thread_id":"t","turn":%d}`, turn) }

func stateFor(turn int) State {
	return State{
		Reason: ReasonToolResults, Status: "running", Iteration: turn, Version: int64(turn),
		Cost:           thread.Cost{Turns: turn, InputTokens: 100 * turn, OutputTokens: 20 * turn, Spend: 0.001 * float64(turn)},
		ToolCallsTotal: turn, ToolCallsIteration: 1,
		ToolCallsByTool:          map[string]int{"rye/file-system/fs_write": turn},
		ToolCallsIterationByTool: map[string]int{"rye/file-system/fs_write": 1},
		RunningSummary:           fmt.Sprintf("wrote %d files", turn),
		Extra:                    map[string]json.RawMessage{"lease": json.RawMessage(fmt.Sprintf(`{"n":%d}`, turn))},
	}
}

// writeTranscript writes a thread_started event and n turns.
func writeTranscript(t testing.TB, s *setup, n int) []thread.Message {
	t.Helper()
	w := s.writer(t)
	mustAppend(t, w, TypeThreadStarted, ThreadStarted{Directive: "test/transcript", Model: "scripted"})
	var msgs []thread.Message
	for turn := 1; turn <= n; turn++ {
		msgs = append(msgs, writeTurn(t, w, turn)...)
	}
	return msgs
}

// snapshot copies every object of a store.
func snapshot(t testing.TB, st blobstore.Store, prefix string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	infos, err := st.List(ctx, prefix)
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, in := range infos {
		b, err := st.Get(ctx, in.Key)
		require.NoError(t, err)
		out[in.Key] = b
	}
	return out
}

func storeOf(t testing.TB, objs map[string][]byte) blobstore.Store {
	t.Helper()
	m := blobstore.NewMemory()
	for k, v := range objs {
		require.NoError(t, m.Put(context.Background(), k, v))
	}
	return m
}
