package transcript

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Event is one transcript line: a JSON object with the keys timestamp,
// thread_id, seq, event_type and payload, in that order. Seq numbers the
// events of one thread from 1, across segments, without gaps. It is the
// API's spooltype.Event.
type Event = spooltype.Event

// Payload is e's payload decoded as T, for a render: what does not decode
// is left zero, and the render shows what it can.
func Payload[T any](e Event) T {
	var p T
	_ = e.Decode(&p)
	return p
}

// Event types. Thread lifecycle, model, tool, hook and limit events are never
// dropped; token_delta is droppable.
const (
	TypeThreadStarted     = "thread_started"
	TypeThreadContinued   = "thread_continued" // this thread continues PreviousThreadID
	TypeThreadResumed     = "thread_resumed"   // written in the original thread when a user resumes it
	TypeThreadHandoff     = "thread_handoff"   // written in the old thread at automatic handoff
	TypeThreadForked      = "thread_forked"    // the first event of a fork: the prefix it carries
	TypeThreadWaiting     = "thread_waiting"   // suspended on children
	TypeThreadCompleted   = "thread_completed"
	TypeThreadCancelled   = "thread_cancelled"
	TypeThreadError       = "error"
	TypeCognitionIn       = "cognition_in"  // a user message given to the model
	TypeCognitionOut      = "cognition_out" // the model's answer, with tool calls
	TypeTokenDelta        = "token_delta"   // streamed text (droppable, coalesced)
	TypeToolCallStart     = "tool_call_start"
	TypeToolCallResult    = "tool_call_result"
	TypeChildSpawned      = "child_spawned"
	TypeChildRefused      = "child_refused"      // a spawn the runtime refused (budget, spawns, depth, ...)
	TypeApprovalRequested = "approval_requested" // a tool call waits for a person's decision
	TypeApprovalDecided   = "approval_decided"   // a person (or the timeout) decided it
	TypeUserMessage       = "user_message"       // a message a person sent (spool thread send / interrupt)
	TypeLimitExceeded     = "limit_exceeded"
	TypeHookFired         = "hook_fired"
	TypeDirectiveReturn   = "directive_return"
	TypeCheckpoint        = "checkpoint" // written only by Writer.Checkpoint
)

// ThreadStarted is the payload of thread_started.
type ThreadStarted struct {
	Directive        string           `json:"directive"`
	Model            string           `json:"model,omitempty"`
	ParentID         string           `json:"parent_id,omitempty"`
	PreviousThreadID string           `json:"previous_thread_id,omitempty"`
	Inputs           json.RawMessage  `json:"inputs,omitempty"`
	Limits           *thread.Resolved `json:"limits,omitempty"`
	Capabilities     []string         `json:"capabilities,omitempty"`
	BundleDigest     string           `json:"bundle_digest,omitempty"`
	// Tenant and Priority are the thread's (its root's); absent in a
	// transcript written before tenants: the default tenant's.
	Tenant   string `json:"tenant,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Tags are the thread's (its root's); absent when it has none.
	Tags map[string]string `json:"tags,omitempty"`
}

// ThreadContinued is the payload of thread_continued. ReconstructedTurns
// counts the previous thread's model turns (assistant messages) this
// thread carries, as a resume's reconstructed_turns does.
type ThreadContinued struct {
	PreviousThreadID   string `json:"previous_thread_id"`
	ReconstructedTurns int    `json:"reconstructed_turns"`
}

// ThreadHandoff is the payload of thread_handoff. TrailingTurns counts the
// messages the continuation carries; PromptTokens and ContextWindow are
// the usage that triggered the handoff.
type ThreadHandoff struct {
	NewThreadID    string `json:"new_thread_id"`
	TrailingTurns  int    `json:"trailing_turns"`
	TrailingTokens int    `json:"trailing_tokens,omitempty"`
	PromptTokens   int    `json:"prompt_tokens,omitempty"`
	ContextWindow  int    `json:"context_window,omitempty"`
}

// ThreadResumed is the payload of thread_resumed.
type ThreadResumed struct {
	NewThreadID        string `json:"new_thread_id"`
	Directive          string `json:"directive"`
	MessagePreview     string `json:"message_preview"`
	ReconstructedTurns int    `json:"reconstructed_turns"`
}

// ThreadForked is the payload of thread_forked, the first event of a
// thread forked from another (`spool thread fork`): the source thread, the
// turn whose end the carried conversation reaches, the source's segment
// that holds that end and its chain hash (the SHA-256 of the source's
// transcript up to the segment's end, which names the prefix), how many
// model turns the carried messages hold, and the message the fork adds.
type ThreadForked struct {
	ForkedFrom         string `json:"forked_from"`
	ForkTurn           int    `json:"fork_turn"`
	SourceSegment      int64  `json:"source_segment"`
	SourceChainHash    string `json:"source_chain_hash"`
	ReconstructedTurns int    `json:"reconstructed_turns"`
	Message            string `json:"message,omitempty"`
}

// ThreadWaiting is the payload of thread_waiting.
type ThreadWaiting struct {
	ChildIDs []string `json:"child_ids"`
}

// ThreadCompleted is the payload of thread_completed, the last event of a
// thread that ended other than cancelled (that is thread_cancelled). Status
// is completed (empty in old transcripts), error (Error says why) or
// continued (after a thread_handoff).
type ThreadCompleted struct {
	Status  string            `json:"status,omitempty"`
	Result  string            `json:"result,omitempty"`
	Outputs map[string]string `json:"outputs,omitempty"`
	Error   *Error            `json:"error,omitempty"`
	Cost    thread.Cost       `json:"cost"`
}

// ThreadCancelled is the payload of thread_cancelled.
type ThreadCancelled struct {
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"` // thread id or "user"
}

// Error is the payload of error (a failed model call; Retryable marks one
// the thread retries) and a failed thread's error in thread_completed.
type Error struct {
	Class     string `json:"class,omitempty"` // rate_limited, transient, permanent, cancelled
	Code      string `json:"code,omitempty"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable,omitempty"`
}

// UnmarshalJSON also reads the keys of error events that workers wrote
// before they used this type ("error", "classification"): signed
// transcripts are never rewritten, so renders and search read both.
func (e *Error) UnmarshalJSON(b []byte) error {
	type plain Error
	var v struct {
		plain
		LegacyMessage string `json:"error"`
		LegacyClass   string `json:"classification"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Error(v.plain)
	if e.Message == "" {
		e.Message = v.LegacyMessage
	}
	if e.Class == "" {
		e.Class = v.LegacyClass
	}
	return nil
}

// CognitionIn is the payload of cognition_in: a user message.
type CognitionIn struct {
	Content string `json:"content"`
}

// Usage is a model call's token usage.
type Usage struct {
	InputTokens      int `json:"input_tokens"`
	OutputTokens     int `json:"output_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
}

// CognitionOut is the payload of cognition_out: an assistant message.
type CognitionOut struct {
	Content    string            `json:"content"`
	ToolCalls  []thread.ToolCall `json:"tool_calls,omitempty"`
	Model      string            `json:"model,omitempty"`
	Usage      Usage             `json:"usage"`
	Spend      float64           `json:"spend"`
	Turn       int               `json:"turn"`
	StopReason string            `json:"stop_reason,omitempty"`
}

// TokenDelta is the payload of token_delta.
type TokenDelta struct {
	Text string `json:"text"`
}

// ToolCallStart is the payload of tool_call_start.
type ToolCallStart struct {
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input,omitempty"`
}

// ToolCallResult is the payload of tool_call_result.
type ToolCallResult struct {
	CallID   string `json:"call_id"`
	Tool     string `json:"tool"`
	Output   string `json:"output"`
	IsError  bool   `json:"is_error,omitempty"`
	Artifact string `json:"artifact,omitempty"` // blob key of a large output stored aside
}

// ChildSpawned is the payload of child_spawned.
type ChildSpawned struct {
	ChildID   string `json:"child_id"`
	Directive string `json:"directive"`
	Async     bool   `json:"async,omitempty"`
	// DroppedCapabilities are what the child's directive asks for that
	// this thread does not hold, which the child runs without.
	DroppedCapabilities []string `json:"dropped_capabilities,omitempty"`
}

// ChildRefused is the payload of child_refused: a spawn of Directive that
// did not start, with the error's code (e.g. spend_exceeded) and message.
type ChildRefused struct {
	Directive string `json:"directive"`
	Code      string `json:"code"`
	Message   string `json:"message"`
}

// ApprovalRequested is the payload of approval_requested: the gated call,
// its input (durable here), and when the approval times out, if it does.
type ApprovalRequested struct {
	CallID string `json:"call_id"`
	// RequestID is the request's nonce, which its decision links carry.
	RequestID string          `json:"request_id,omitempty"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input,omitempty"`
	Deadline  string          `json:"deadline,omitempty"`
	OnTimeout string          `json:"on_timeout,omitempty"`
}

// ApprovalDecided is the payload of approval_decided: the decision
// (approve or deny), who made it ("timeout" when the rule's timeout did)
// and why.
type ApprovalDecided struct {
	CallID    string `json:"call_id"`
	RequestID string `json:"request_id,omitempty"`
	Tool      string `json:"tool"`
	Decision  string `json:"decision"`
	By        string `json:"by"`
	Reason    string `json:"reason,omitempty"`
}

// UserMessage is the payload of user_message: a message a person sent to
// a running or waiting thread, and whether it interrupted the work in
// flight.
type UserMessage struct {
	Content     string `json:"content"`
	By          string `json:"by,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
}

// UnmarshalJSON also reads "child_thread_id", which workers wrote before
// they used this type.
func (c *ChildSpawned) UnmarshalJSON(b []byte) error {
	type plain ChildSpawned
	var v struct {
		plain
		LegacyChildID string `json:"child_thread_id"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = ChildSpawned(v.plain)
	if c.ChildID == "" {
		c.ChildID = v.LegacyChildID
	}
	return nil
}

// LimitExceeded is the payload of limit_exceeded.
type LimitExceeded struct {
	Code    string  `json:"code"`
	Current float64 `json:"current"`
	Max     float64 `json:"max"`
}

// UnmarshalJSON also reads the keys workers wrote before they used this
// type ("limit_code", "current_value", "current_max", the limit hook
// event's context keys).
func (l *LimitExceeded) UnmarshalJSON(b []byte) error {
	type plain LimitExceeded
	var v struct {
		plain
		LegacyCode    string   `json:"limit_code"`
		LegacyCurrent *float64 `json:"current_value"`
		LegacyMax     *float64 `json:"current_max"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = LimitExceeded(v.plain)
	if l.Code == "" && v.LegacyCode != "" {
		l.Code = v.LegacyCode
		if v.LegacyCurrent != nil {
			l.Current = *v.LegacyCurrent
		}
		if v.LegacyMax != nil {
			l.Max = *v.LegacyMax
		}
	}
	return nil
}

// HookFired is the payload of hook_fired: one hook's item action (load,
// execute, search) ran; Error says why it failed (a refused capability,
// a missing item, a failed tool). Action is the primary.
type HookFired struct {
	HookID   string          `json:"hook_id"`
	Event    string          `json:"event"`
	Layer    int             `json:"layer"`
	Action   string          `json:"action,omitempty"`
	ItemType string          `json:"item_type,omitempty"`
	ItemID   string          `json:"item_id,omitempty"`
	Error    string          `json:"error,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
}

// DirectiveReturn is the payload of directive_return.
type DirectiveReturn struct {
	Outputs map[string]string `json:"outputs"`
}

// appendEvent appends the transcript line of an event, without the
// newline: what marshal writes for the Event, built directly. payload
// must be compact JSON (as marshal writes it, or json.Compact's), which
// marshal would copy as it is.
func appendEvent(dst []byte, ts time.Time, threadID string, seq int64, eventType string, payload []byte) ([]byte, error) {
	dst = append(dst, `{"timestamp":"`...)
	dst, err := ts.AppendText(dst) // time.Time's MarshalJSON, unquoted
	if err != nil {
		return nil, err
	}
	dst = append(dst, `","thread_id":`...)
	dst = appendJSONString(dst, threadID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, `,"event_type":`...)
	dst = appendJSONString(dst, eventType)
	dst = append(dst, `,"payload":`...)
	if payload == nil {
		payload = []byte("null")
	}
	dst = append(dst, payload...)
	return append(dst, '}'), nil
}

// appendJSONString appends s as a JSON string the way marshal writes it
// (an Encoder with SetEscapeHTML(false)): invalid UTF-8 becomes \ufffd;
// U+2028 and U+2029 are escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = appendEscapedByte(append(dst, s[start:i]...), b)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// hexDigits are the digits of a \u escape.
const hexDigits = "0123456789abcdef"

// appendEscapedByte appends the escape of the ASCII byte b that a JSON
// string cannot hold as it is, as marshal writes it: a quote or a
// backslash, the control characters with a short form (\b, \f, \n, \r,
// \t), any other as \u00XX.
func appendEscapedByte(dst []byte, b byte) []byte {
	switch b {
	case '\\', '"':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	default: // other control characters
		return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
	}
}

// marshal encodes v as compact JSON without HTML escaping, so that
// json.RawMessage fields (tool inputs) come back byte for byte.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// decodeLine decodes one transcript line. Lines the Writer wrote have a
// fixed layout, decoded here without reflection; anything else goes
// through encoding/json. The payload is not validated on the fast path:
// verification only returns events of segments whose bytes are covered by
// a trusted signature, and those were encoded by json.
func decodeLine(line []byte, ev *Event) error {
	if fastDecode(line, ev) {
		return nil
	}
	*ev = Event{}
	return json.Unmarshal(line, ev)
}

// fastDecode decodes a line in the Writer's fixed layout (timestamp,
// thread_id, seq, event_type, payload, the strings without escapes), and
// reports false for any other line, which encoding/json then decodes.
func fastDecode(line []byte, ev *Event) bool {
	ts, rest, ok := cutString(line, `{"timestamp":"`)
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return false
	}
	tid, rest, ok := cutString(rest, `,"thread_id":"`)
	if !ok {
		return false
	}
	seq, rest, ok := cutSeq(rest, `,"seq":`)
	if !ok {
		return false
	}
	typ, rest, ok := cutString(rest, `,"event_type":"`)
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(rest, []byte(`,"payload":`))
	if !ok || len(rest) < 3 || rest[len(rest)-1] != '}' {
		return false
	}
	*ev = Event{Timestamp: t, ThreadID: string(tid), Seq: seq, Type: string(typ), Payload: json.RawMessage(rest[:len(rest)-1])}
	return true
}

// cutString cuts prefix (up to a string's opening quote) from rest, and
// then the string's value up to its closing quote: not ok when rest does
// not start with prefix, or the string is unterminated or has an escape.
func cutString(rest []byte, prefix string) (val, after []byte, ok bool) {
	rest, ok = bytes.CutPrefix(rest, []byte(prefix))
	if !ok {
		return nil, nil, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return nil, nil, false
	}
	return rest[:i], rest[i+1:], true
}

// cutSeq cuts prefix from rest, and then a sequence number: up to 18
// digits without a leading zero (0 itself aside).
func cutSeq(rest []byte, prefix string) (seq int64, after []byte, ok bool) {
	rest, ok = bytes.CutPrefix(rest, []byte(prefix))
	if !ok {
		return 0, nil, false
	}
	i := 0
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9' && i < 18; i++ {
		seq = seq*10 + int64(rest[i]-'0')
	}
	if i == 0 || (rest[0] == '0' && i > 1) {
		return 0, nil, false
	}
	return seq, rest[i:], true
}
