// Package reply is the one protocol of spool's Lua scripts in Redis, and
// the helpers that read their replies (ledger, queue, ratelimit,
// orchestrator).
//
// A script answers in one of two ways:
//
//   - It did what it was asked: its reply is its values (a number, a
//     string, an array of them, arrays nested) in the order its comment
//     lists. No status word comes first.
//   - It refused (not found, a stale version, no budget left): an error
//     reply (redis.error_reply) "CODE field field ...": CODE is upper-case
//     letters, unique across spool's scripts, so that the refusal of a
//     compound script (one that calls several packages' Lua functions)
//     says which of them refused; the fields are words without spaces,
//     and only the last may be free text. A script refuses before it
//     writes, unless its comment says otherwise: a compound script stops
//     at the first refusal, and what its steps before it wrote stays
//     (Redis does not roll a script back).
//
// A library function of a .lua file (ledger.lua, registry.lua) always
// returns a table: its reply, or redis.error_reply's {err = ...}, so its
// caller tests r.err and returns r as it is.
//
// Go reads a refusal with Refused; every other error of a script (a
// connection, a redis.call that failed) is a failure of Redis, returned
// as it is, wrapped.
package reply

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Refusal is a script's refusal: its code and the fields after it.
type Refusal struct {
	Code string
	// Fields are the words after the code.
	Fields []string
}

// Refused returns err's refusal when err is an error reply of Redis whose
// first word is an upper-case code other than Redis's own ERR; callers
// match the codes their scripts refuse with, and treat any other as a
// failure.
func Refused(err error) (*Refusal, bool) {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return nil, false
	}
	// Redis puts "ERR " before an error reply of one word.
	msg := re.Error()
	if m, ok := strings.CutPrefix(msg, "ERR "); ok && !strings.Contains(m, " ") {
		msg = m
	}
	code, rest, _ := strings.Cut(msg, " ")
	if code == "" || code == "ERR" || strings.TrimLeft(code, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		return nil, false
	}
	r := &Refusal{Code: code}
	if rest != "" {
		r.Fields = strings.Split(rest, " ")
	}
	return r, true
}

// Field is the i-th field (0: the first after the code), "" past the end.
func (r *Refusal) Field(i int) string {
	if i < 0 || i >= len(r.Fields) {
		return ""
	}
	return r.Fields[i]
}

// Int is the i-th field as an integer, 0 when it is none.
func (r *Refusal) Int(i int) int64 {
	n, _ := strconv.ParseInt(r.Field(i), 10, 64)
	return n
}

// Text is the fields from the i-th on, as the script wrote them: a
// message.
func (r *Refusal) Text(i int) string {
	if i >= len(r.Fields) {
		return ""
	}
	return strings.Join(r.Fields[i:], " ")
}

func (r *Refusal) Error() string {
	if len(r.Fields) == 0 {
		return r.Code
	}
	return r.Code + " " + strings.Join(r.Fields, " ")
}

// Array is v as an array reply; nil when it is none.
func Array(v any) []any {
	a, _ := v.([]any)
	return a
}

// At is the i-th element of a; nil past the end.
func At(a []any, i int) any {
	if i < 0 || i >= len(a) {
		return nil
	}
	return a[i]
}

// Int is v as an integer: an integer reply, or a string of one (a field
// a script returned as it is stored); 0 otherwise.
func Int(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// String is v as a string: a string reply, or an integer one written in
// decimal; "" otherwise (a nil reply).
func String(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// Strings is v, an array reply of strings, as a slice.
func Strings(v any) []string {
	a := Array(v)
	out := make([]string, 0, len(a))
	for _, e := range a {
		out = append(out, String(e))
	}
	return out
}

// Unexpected is the error for a reply that is not what script's comment
// says it returns.
func Unexpected(script string, v any) error {
	return fmt.Errorf("%s script: unexpected reply %v", script, v)
}

// Returned is the refusal msg that a script returned as a value in its
// reply instead of refusing with it (a step that refused after an earlier
// step wrote, whose write the caller must still learn): an error that
// Refused reads as it reads the script's own refusals. Nil for "".
func Returned(msg string) error {
	if msg == "" {
		return nil
	}
	return returnedError(msg)
}

type returnedError string

func (e returnedError) Error() string { return string(e) }

// RedisError marks a returned refusal as a Redis error reply (redis.Error).
func (returnedError) RedisError() {}
