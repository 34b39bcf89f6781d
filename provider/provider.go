package provider

import (
	"context"

	"github.com/spool-run/spool/thread"
)

// DefaultMaxTokens is the output-token cap used when Request.MaxTokens is 0
// (the Anthropic API requires one).
const DefaultMaxTokens = 4096

// Provider is one LLM backend. Implementations are safe for concurrent use.
type Provider interface {
	// Complete runs one model call. When onDelta is non-nil the call streams
	// and onDelta receives text deltas in order, on the calling goroutine;
	// a nil onDelta makes a plain request. Cancelling ctx aborts the call
	// (mid-stream too) with a "cancelled" *Error. Every returned error is an
	// *Error (use errors.As or Classify).
	Complete(ctx context.Context, req *Request, onDelta func(text string)) (*Response, error)
	// ContextWindow is the model's context window in tokens, 0 if unknown
	// (then the caller cannot make handoff decisions for it).
	ContextWindow(model string) int
	// Cost prices usage in USD. An unknown model is ErrUnknownModel.
	Cost(model string, u Usage) (float64, error)
}

// Request is one model call, provider-neutral.
type Request struct {
	// Model is the model as the thread names it ("claude-sonnet-4-5",
	// "anthropic/claude-sonnet-4-5", "openai/meta-llama/Llama-3-8B");
	// empty means the model the provider was created with. An adapter
	// sends it without the prefix that routed it (WireModel).
	Model string
	// Messages are the conversation, roles user/assistant/tool; a tool
	// message answers the assistant tool call with the same ToolCallID.
	Messages []thread.Message
	// Tools offered to the model; Name is an item id
	// ("rye/file-system/fs_write"), mapped to a wire-safe name per request.
	Tools []thread.ToolDef
	// MaxTokens caps output tokens; 0 means DefaultMaxTokens.
	MaxTokens int
	// Thread describes the calling thread (used by the scripted provider).
	Thread ThreadInfo
	// OnToolDelta, when set on a streamed call (onDelta non-nil), gets
	// each piece of a tool call's arguments as the model writes them, in
	// order, on the calling goroutine.
	OnToolDelta func(ToolDelta)
}

// ToolDelta is a piece of the arguments (JSON text) of a tool call as
// the model writes them: Index is the call's place in the response, ID
// its id (as the response will name it), Name its tool (an item id).
type ToolDelta struct {
	Index int
	ID    string
	Name  string
	Args  string
}

// ThreadInfo is what a provider may know about the calling thread. Only the
// scripted provider uses it, for entry selection and templates.
type ThreadInfo struct {
	ID               string
	Directive        string
	ParentID         string
	PreviousThreadID string
	ChainIndex       int            // 0 for the first thread of a continuation chain
	Inputs           map[string]any // the thread's directive inputs
	Turn             int            // 1-based turn of this thread; 0 = derive from Messages
}

// Response is a model's answer to one Request.
type Response struct {
	Text       string
	ToolCalls  []thread.ToolCall // Name is the item id, Input valid JSON
	Usage      Usage
	StopReason string // as the API reports it: end_turn, tool_use, stop, tool_calls, max_tokens, length ...
	Model      string // the model that answered, as the API reports it
}

// Usage is token usage normalised across APIs: InputTokens EXCLUDES cache
// reads and writes (Anthropic reports it that way; OpenAI's prompt_tokens
// include cached tokens and are normalised here).
type Usage struct {
	InputTokens      int `json:"input_tokens"`
	OutputTokens     int `json:"output_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
}

// PromptTokens is the whole prompt the model saw: input plus cache reads and
// writes. It is what ContextUsage wants as lastPromptTokens.
func (u Usage) PromptTokens() int {
	return u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Add returns the field-wise sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
	}
}

func maxTokens(req *Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return DefaultMaxTokens
}
