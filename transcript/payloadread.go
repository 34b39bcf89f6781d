package transcript

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/spool-run/spool/thread"
)

// Reading the payloads the knowledge render shows, without reflection.
//
// A payload the Writer wrote is marshal's encoding of a payload struct:
// one object, each member named exactly as its field's tag, once. For
// such a payload, a member is the only value its field gets from
// encoding/json, so reading the member is decoding the field. Anything
// else (a name spelled otherwise, which encoding/json may still match
// case-insensitively; a repeated name; a name of no field; a value of an
// unexpected type, null included; invalid JSON) goes to json.Unmarshal,
// whose result on every input is the one the render must show. The
// readers fill only the fields the render reads.

// The JSON names of the payload structs' fields, in field order
// (TestPayloadNames holds them to the struct tags).
var (
	threadStartedNames   = []string{"directive", "model", "parent_id", "previous_thread_id", "inputs", "limits", "capabilities", "bundle_digest"}
	cognitionInNames     = []string{"content"}
	cognitionOutNames    = []string{"content", "tool_calls", "model", "usage", "spend", "turn", "stop_reason"}
	toolCallNames        = []string{"id", "name", "input"}
	toolCallResultNames  = []string{"call_id", "tool", "output", "is_error", "artifact"}
	hookFiredNames       = []string{"hook_id", "event", "layer", "action", "item_type", "item_id", "error", "result"}
	threadCompletedNames = []string{"status", "result", "outputs", "error", "cost"}
)

// payloadReader reads payloads; its buffers are reused from one to the
// next. The zero value is ready; not for concurrent use.
type payloadReader struct {
	vals [8][]byte // raw member values, by index into a names list
	call [3][]byte // the same for a tool call
	tmp  []byte    // a decoded string
}

// fields splits payload, an object, into the raw values of its members:
// vals[k] for names[k], nil when absent. It reports false unless payload
// is valid JSON whose members are each named exactly (no escapes) one of
// names, at most once.
func (r *payloadReader) fields(payload []byte, names []string, vals [][]byte) bool {
	clear(vals)
	c := canonicalizer{src: payload}
	i := skipSpace(payload, 0)
	if i >= len(payload) || payload[i] != '{' {
		return false
	}
	if i = skipSpace(payload, i+1); i < len(payload) && payload[i] == '}' {
		return skipSpace(payload, i+1) == len(payload)
	}
	for {
		if i >= len(payload) || payload[i] != '"' {
			return false
		}
		end, simple, err := c.scanString(i)
		if err != nil || !simple {
			return false
		}
		k := 0
		for k < len(names) && string(payload[i+1:end-1]) != names[k] {
			k++
		}
		if k == len(names) || vals[k] != nil {
			return false
		}
		if i = skipSpace(payload, end); i >= len(payload) || payload[i] != ':' {
			return false
		}
		i = skipSpace(payload, i+1)
		if end, err = c.skip(i, 1); err != nil {
			return false
		}
		vals[k] = payload[i:end]
		if i = skipSpace(payload, end); i >= len(payload) {
			return false
		}
		switch payload[i] {
		case '}':
			return skipSpace(payload, i+1) == len(payload)
		case ',':
			i = skipSpace(payload, i+1)
		default:
			return false
		}
	}
}

// str sets *dst to the JSON string raw (checked by fields), decoded as
// encoding/json decodes it. Absent (nil) leaves *dst alone; anything but a
// string reports false.
func (r *payloadReader) str(raw []byte, dst *string) bool {
	if raw == nil {
		return true
	}
	if raw[0] != '"' {
		return false
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		*dst = string(body)
		return true
	}
	r.tmp = unquoteJSON(r.tmp[:0], body)
	*dst = string(r.tmp)
	return true
}

// boolean sets *dst from true or false; absent leaves it alone.
func boolean(raw []byte, dst *bool) bool {
	switch string(raw) {
	case "":
		return raw == nil
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return false
	}
	return true
}

// integer sets *dst from an integer literal small enough for any int;
// absent leaves it alone. A fraction or exponent reports false
// (encoding/json refuses those for an int, leaving the field alone).
func integer(raw []byte, dst *int) bool {
	if raw == nil {
		return true
	}
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 9 {
		return false
	}
	n := 0
	for _, d := range digits {
		if d < '0' || d > '9' {
			return false
		}
		n = n*10 + int(d-'0')
	}
	if raw[0] == '-' {
		n = -n
	}
	*dst = n
	return true
}

// elements calls fn with each element of the JSON array raw (checked by
// fields) and reports false if fn does.
func elements(raw []byte, fn func(elem []byte) bool) bool {
	c := canonicalizer{src: raw}
	i := skipSpace(raw, 1)
	if raw[i] == ']' {
		return true
	}
	for {
		end, err := c.skip(i, 1)
		if err != nil || !fn(raw[i:end]) {
			return false
		}
		if i = skipSpace(raw, end); raw[i] == ']' {
			return true
		}
		i = skipSpace(raw, i+1)
	}
}

func (r *payloadReader) threadStarted(payload []byte) (p ThreadStarted) {
	v := r.vals[:len(threadStartedNames)]
	if r.fields(payload, threadStartedNames, v) && r.str(v[0], &p.Directive) && r.str(v[1], &p.Model) {
		return p
	}
	p = ThreadStarted{}
	_ = json.Unmarshal(payload, &p)
	return p
}

func (r *payloadReader) cognitionIn(payload []byte) (p CognitionIn) {
	v := r.vals[:len(cognitionInNames)]
	if r.fields(payload, cognitionInNames, v) && r.str(v[0], &p.Content) {
		return p
	}
	p = CognitionIn{}
	_ = json.Unmarshal(payload, &p)
	return p
}

func (r *payloadReader) cognitionOut(payload []byte) (p CognitionOut) {
	v := r.vals[:len(cognitionOutNames)]
	if r.fields(payload, cognitionOutNames, v) && r.str(v[0], &p.Content) && integer(v[5], &p.Turn) && r.toolCalls(v[1], &p.ToolCalls) {
		return p
	}
	p = CognitionOut{}
	_ = json.Unmarshal(payload, &p)
	return p
}

// toolCalls reads an array of tool calls (their Name and Input).
func (r *payloadReader) toolCalls(raw []byte, dst *[]thread.ToolCall) bool {
	if raw == nil {
		return true
	}
	if raw[0] != '[' {
		return false
	}
	calls := []thread.ToolCall{}
	ok := elements(raw, func(elem []byte) bool {
		var call thread.ToolCall
		v := r.call[:]
		if !r.fields(elem, toolCallNames, v) || !r.str(v[0], &call.ID) || !r.str(v[1], &call.Name) {
			return false
		}
		if v[2] != nil {
			if string(v[2]) == "null" {
				return false
			}
			call.Input = v[2] // read only: no need for encoding/json's copy
		}
		calls = append(calls, call)
		return true
	})
	if ok {
		*dst = calls
	}
	return ok
}

func (r *payloadReader) toolCallResult(payload []byte) (p ToolCallResult) {
	v := r.vals[:len(toolCallResultNames)]
	if r.fields(payload, toolCallResultNames, v) && r.str(v[1], &p.Tool) && r.str(v[2], &p.Output) && boolean(v[3], &p.IsError) {
		return p
	}
	p = ToolCallResult{}
	_ = json.Unmarshal(payload, &p)
	return p
}

func (r *payloadReader) hookFired(payload []byte) (p HookFired) {
	v := r.vals[:len(hookFiredNames)]
	if r.fields(payload, hookFiredNames, v) && r.str(v[0], &p.HookID) && r.str(v[1], &p.Event) && r.str(v[6], &p.Error) {
		return p
	}
	p = HookFired{}
	_ = json.Unmarshal(payload, &p)
	return p
}

// threadCompleted reads a thread_completed payload without an error
// member (Error has its own UnmarshalJSON: encoding/json reads that one).
func (r *payloadReader) threadCompleted(payload []byte) (p ThreadCompleted) {
	v := r.vals[:len(threadCompletedNames)]
	if r.fields(payload, threadCompletedNames, v) && v[3] == nil && r.str(v[0], &p.Status) && r.str(v[1], &p.Result) && r.stringMap(v[2], &p.Outputs) {
		return p
	}
	p = ThreadCompleted{}
	_ = json.Unmarshal(payload, &p)
	return p
}

// stringMap reads an object of strings (names decoded, a repeated name
// keeping its last value, as encoding/json fills a map).
func (r *payloadReader) stringMap(raw []byte, dst *map[string]string) bool {
	if raw == nil {
		return true
	}
	if raw[0] != '{' {
		return false
	}
	m := map[string]string{}
	c := canonicalizer{src: raw}
	i := skipSpace(raw, 1)
	if raw[i] != '}' {
		for {
			end, _, err := c.scanString(i)
			if err != nil {
				return false
			}
			var k, val string
			r.str(raw[i:end], &k)
			i = skipSpace(raw, skipSpace(raw, end)+1) // past the colon
			if end, err = c.skip(i, 1); err != nil || !r.str(raw[i:end], &val) {
				return false
			}
			m[k] = val
			if i = skipSpace(raw, end); raw[i] == '}' {
				break
			}
			i = skipSpace(raw, i+1)
		}
	}
	*dst = m
	return true
}
