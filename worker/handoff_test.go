package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// agentConversation is what an agent loop leaves: the directive's prompt,
// then n turns of an assistant message with one tool call and the tool's
// result: 2n+1 messages, one of them a user message.
func agentConversation(n int) []thread.Message {
	msgs := []thread.Message{{Role: thread.RoleUser, Content: "# Build the dashboard\n\n" + strings.Repeat("Render every view of the spec. ", 20)}}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("call_%d_1", i)
		input, _ := json.Marshal(map[string]string{"path": fmt.Sprintf("views/v%d.tsx", i), "content": strings.Repeat("x", 40*i)})
		msgs = append(msgs,
			thread.Message{Role: thread.RoleAssistant, Content: fmt.Sprintf("Writing view %d. %s", i, strings.Repeat("Reasoning. ", i)),
				ToolCalls: []thread.ToolCall{{ID: id, Name: "rye/file-system/fs_write", Input: input}}},
			thread.Message{Role: thread.RoleTool, ToolCallID: id, ToolName: "rye/file-system/fs_write", Content: fmt.Sprintf("wrote %d bytes to views/v%d.tsx", 40*i, i)},
		)
	}
	return msgs
}

func tokens(msgs []thread.Message) int {
	n := 0
	for _, m := range msgs {
		n += thread.EstimateMessageTokens(m)
	}
	return n
}

// requireValidStart checks what providers require of a conversation's
// opening: a user message first, every tool result answering a call made
// before it in the window, every call answered in the window.
func requireValidStart(t *testing.T, msgs []thread.Message) {
	t.Helper()
	require.NotEmpty(t, msgs)
	require.Equal(t, thread.RoleUser, msgs[0].Role, "the first message is a user message")
	called, answered := map[string]bool{}, map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case thread.RoleAssistant:
			for _, c := range m.ToolCalls {
				called[c.ID] = true
			}
		case thread.RoleTool:
			require.True(t, called[m.ToolCallID], "message %d answers call %s, which is not in the window", i, m.ToolCallID)
			answered[m.ToolCallID] = true
		}
	}
	for id := range called {
		require.True(t, answered[id], "call %s is not answered in the window", id)
	}
}

func withNote(msgs ...thread.Message) []thread.Message {
	return append([]thread.Message{{Role: thread.RoleUser, Content: omittedTurnsNote}}, msgs...)
}

func TestTrailingMessages(t *testing.T) {
	t.Parallel()
	conv := agentConversation(10)
	require.Len(t, conv, 21)
	// conv[13] is turn 7's assistant message, conv[14] its result; turns
	// 8 to 10 are conv[15:].
	lastThree := tokens(conv[15:])

	twoCalls := []thread.Message{
		{Role: thread.RoleUser, Content: "Read both files."},
		{Role: thread.RoleAssistant, Content: "Reading both.", ToolCalls: []thread.ToolCall{
			{ID: "call_1_1", Name: "rye/file-system/fs_read", Input: json.RawMessage(`{"path":"a.txt"}`)},
			{ID: "call_1_2", Name: "rye/file-system/fs_read", Input: json.RawMessage(`{"path":"b.txt"}`)},
		}},
		{Role: thread.RoleTool, ToolCallID: "call_1_1", ToolName: "rye/file-system/fs_read", Content: strings.Repeat("a", 400)},
		{Role: thread.RoleTool, ToolCallID: "call_1_2", ToolName: "rye/file-system/fs_read", Content: "b"},
	}
	finalText := append(agentConversation(3), thread.Message{Role: thread.RoleAssistant, Content: "All three views are written."})
	resumed := append(agentConversation(2), thread.Message{Role: thread.RoleUser, Content: "Now add a fourth view."})

	tests := []struct {
		name     string
		msgs     []thread.Message
		ceiling  int
		want     []thread.Message
		wantKept int
	}{
		{
			name: "the window ends on a turn boundary", msgs: conv, ceiling: lastThree,
			want: withNote(conv[15:]...), wantKept: 6,
		},
		{
			// The ceiling also fits turn 7's result, not its call: the
			// orphan result is dropped.
			name: "an orphan tool result at the start is dropped", msgs: conv,
			ceiling: lastThree + thread.EstimateMessageTokens(conv[14]) + thread.EstimateMessageTokens(conv[13]) - 1,
			want:    withNote(conv[15:]...), wantKept: 6,
		},
		{
			name: "everything fits: the prompt opens the window", msgs: conv, ceiling: tokens(conv),
			want: conv, wantKept: 21,
		},
		{
			name: "a ceiling smaller than one message keeps the last result with its call", msgs: conv, ceiling: 1,
			want: withNote(conv[19:]...), wantKept: 2,
		},
		{
			name: "a ceiling smaller than one message keeps a final assistant answer", msgs: finalText, ceiling: 1,
			want: withNote(finalText[len(finalText)-1]), wantKept: 1,
		},
		{
			name: "a ceiling smaller than one message keeps a last user message", msgs: resumed, ceiling: 1,
			want: resumed[len(resumed)-1:], wantKept: 1,
		},
		{
			name: "a result whose sibling call does not fit brings the whole group", msgs: twoCalls,
			ceiling: thread.EstimateMessageTokens(twoCalls[3]),
			want:    withNote(twoCalls[1:]...), wantKept: 3,
		},
		{
			name: "results without any call become one user message", ceiling: 1,
			msgs: []thread.Message{{Role: thread.RoleTool, ToolCallID: "c", Content: "lonely"}},
			want: []thread.Message{{Role: thread.RoleUser, Content: "[tool] lonely"}}, wantKept: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, kept := trailingMessages(tc.msgs, tc.ceiling)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("trailingMessages (-want +got):\n%s", diff)
			}
			require.Equal(t, tc.wantKept, kept)
			requireValidStart(t, got)
		})
	}

	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		got, kept := trailingMessages(nil, 100)
		require.Empty(t, got)
		require.Zero(t, kept)
	})
}

// TestTrailingMessagesInvariants runs every ceiling over realistic
// conversations: the window is always a valid start, it is a suffix of the
// conversation (newest kept), it stays within the ceiling unless the
// ceiling is smaller than the last tool-call group, and a larger ceiling
// never keeps fewer messages.
func TestTrailingMessagesInvariants(t *testing.T) {
	t.Parallel()
	convs := map[string][]thread.Message{
		"tool loop":         agentConversation(10),
		"closed final call": closeToolCalls(append(agentConversation(4), thread.Message{Role: thread.RoleAssistant, ToolCalls: []thread.ToolCall{{ID: "call_5_1", Name: directiveReturnID, Input: json.RawMessage(`{"result":"done"}`)}}})),
		"final text":        append(agentConversation(5), thread.Message{Role: thread.RoleAssistant, Content: "done"}),
	}
	for name, conv := range convs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The smallest window that keeps the last message whole: the
			// last message and, for a tool result, its call's group.
			minimal := len(conv) - 1
			for conv[minimal].Role == thread.RoleTool {
				minimal--
			}
			prev := 0
			for ceiling := 1; ceiling <= tokens(conv)+10; ceiling++ {
				got, kept := trailingMessages(conv, ceiling)
				requireValidStart(t, got)
				require.Equal(t, conv[len(conv)-kept:], got[len(got)-kept:], "ceiling %d: a suffix of the conversation", ceiling)
				if kept > len(conv)-minimal {
					require.LessOrEqual(t, tokens(conv[len(conv)-kept:]), ceiling, "ceiling %d", ceiling)
				}
				require.GreaterOrEqual(t, kept, prev, "ceiling %d keeps fewer messages than a smaller one", ceiling)
				prev = kept
			}
			require.Equal(t, len(conv), prev, "a ceiling that fits everything keeps everything")
		})
	}
}
