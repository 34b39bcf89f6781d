package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// Error classes (directive-format.md): rate_limited and transient are
// retried by the worker, permanent fails the thread, cancelled stops it.
// rate_limited is the provider saying "slow down" (429, Anthropic's 529
// overloaded): the worker waits as told, holding no slot, without using
// up the retries of transient errors.
const (
	ClassRateLimited = "rate_limited"
	ClassTransient   = "transient"
	ClassPermanent   = "permanent"
	ClassCancelled   = "cancelled"
)

// Error is a classified provider error. Every error an adapter returns is
// one; errors.As(err, &*Error) works, and Unwrap reaches the SDK error.
type Error struct {
	Class      string        // one of the Class* constants
	StatusCode int           // HTTP status, 0 when there was none (network, mid-stream)
	RetryAfter time.Duration // from retry-after-ms / retry-after / a rate limit's reset; 0 when not given
	Quota      bool          // spend limit / billing / credit exhausted: permanent, never retry
	Message    string        // the API's message, one line
	Err        error         // the underlying error
}

// Error reads "provider CLASS: DETAIL": the class, then what Detail says.
// A thread's error record, whose code already names the class
// (provider_transient), keeps only the detail (thread.TrimCode).
func (e *Error) Error() string {
	return "provider " + e.Class + ": " + e.Detail()
}

// Detail is the error without its class: "quota: HTTP 429: you exceeded
// your current quota", "HTTP 503: overloaded (retry after 2s)".
func (e *Error) Detail() string {
	var b strings.Builder
	if e.Quota {
		b.WriteString("quota: ")
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, "HTTP %d: ", e.StatusCode)
	}
	switch {
	case e.Message != "":
		b.WriteString(e.Message)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		b.WriteString("no detail")
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the worker may retry the call (rate_limited or
// transient).
func (e *Error) Retryable() bool {
	return e.Class == ClassRateLimited || e.Class == ClassTransient
}

// Classify turns any error from a provider call into an *Error; nil stays
// nil and an *Error in the chain is returned as is.
//
//   - cancelled: context.Canceled;
//   - rate_limited: HTTP 429 and rate-limit messages, and Anthropic's 529
//     overloaded_error (also mid-stream), with RetryAfter from the
//     retry-after-ms or retry-after (seconds or HTTP date) headers, else
//     from the reset headers of the exhausted rate limits;
//   - transient: timeouts (context.DeadlineExceeded too), connection reset or
//     refused, unexpected EOF (a dropped connection), a malformed body or
//     stream event (JSON that does not parse), HTTP 408/409/500/502/503/504,
//     Anthropic api_error/timeout_error (also mid-stream);
//   - permanent: 401 and 403 (a missing, wrong or unauthorised key: no
//     retry can fix it, whatever error type the server gives), other 4xx
//     (400/404/413/422), validation and anything unrecognised;
//   - permanent with Quota: OpenAI insufficient_quota, Anthropic billing_error
//     or "credit balance" errors, whatever their status (often 429).
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Class: ClassCancelled, Message: "request cancelled", Err: err}
	}

	if e := classifySDK(err); e != nil {
		return e
	}
	return classifyTransport(err)
}

// classifySDK classifies an API error of either SDK (an error response, or
// an error event in a stream) from its status, type, code and message; nil
// when err holds none.
func classifySDK(err error) *Error {
	var aerr *anthropic.Error
	if errors.As(err, &aerr) {
		return classifyAnthropic(err, aerr)
	}
	var oerr *openai.Error
	if errors.As(err, &oerr) {
		var h http.Header
		if oerr.Response != nil {
			h = oerr.Response.Header
		}
		return classifyAPI(err, oerr.StatusCode, oerr.Type, oerr.Code, oerr.Message, h)
	}
	var serr *ssestream.StreamError
	if errors.As(err, &serr) {
		return classifyStreamEvent(err, serr)
	}
	return nil
}

// classifyAnthropic classifies Anthropic's error aerr (in err): its type,
// from the SDK or else from the body, and the message from the body. An
// error event inside a 200 stream has no status.
func classifyAnthropic(err error, aerr *anthropic.Error) *Error {
	var env struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(aerr.RawJSON()), &env)
	typ := string(aerr.Type())
	if typ == "" {
		typ = env.Error.Type
	}
	var h http.Header
	if aerr.Response != nil {
		h = aerr.Response.Header
	}
	status := aerr.StatusCode
	if status < 400 {
		status = 0 // an error event inside a 200 stream
	}
	return classifyAPI(err, status, typ, "", env.Error.Message, h)
}

// classifyStreamEvent classifies the error event of an OpenAI stream
// (serr, in err): its type, code and message; a numeric code is taken for
// the status.
func classifyStreamEvent(err error, serr *ssestream.StreamError) *Error {
	var env struct {
		Error struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(serr.Event.Data, &env)
	code := ""
	if env.Error.Code != nil {
		code = fmt.Sprint(env.Error.Code)
	}
	status, _ := strconv.Atoi(code)
	return classifyAPI(err, status, env.Error.Type, code, env.Error.Message, nil)
}

// classifyTransport classifies an error that is no API's answer: a
// timeout, a response that did not parse, a dropped or refused
// connection are transient; anything else is classified by its text.
func classifyTransport(err error) *Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Class: ClassTransient, Message: "request timed out", Err: err}
	}
	if malformed(err) {
		return &Error{Class: ClassTransient, Message: "malformed response: " + oneLine(err.Error()), Err: err}
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		return &Error{Class: ClassTransient, Message: oneLine(err.Error()), Err: err}
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &Error{Class: ClassTransient, Message: oneLine(err.Error()), Err: err}
	}
	var operr *net.OpError
	if errors.As(err, &operr) {
		return &Error{Class: ClassTransient, Message: oneLine(err.Error()), Err: err}
	}
	return classifyMessage(err, 0, oneLine(err.Error()), nil)
}

// classifyAPI classifies an API error from its status, error type/code and
// message. The first that holds wins: quota, a refused key, rate limited,
// transient, any other 4xx; without any, the message alone decides.
func classifyAPI(err error, status int, typ, code, msg string, h http.Header) *Error {
	if msg == "" {
		msg = oneLine(err.Error())
	}
	e := &Error{StatusCode: status, Message: oneLine(msg), Err: err}
	lt, lc := strings.ToLower(typ), strings.ToLower(code)
	switch {
	case quotaAPI(status, lt, lc, msg):
		e.Class, e.Quota = ClassPermanent, true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Class = ClassPermanent
	case rateLimitedAPI(status, lt, lc):
		e.Class = ClassRateLimited
		e.RetryAfter = retryAfter(h, time.Now())
	case transientAPI(status, lt):
		e.Class = ClassTransient
		e.RetryAfter = retryAfter(h, time.Now())
	case status >= 400:
		e.Class = ClassPermanent
	default:
		return classifyMessage(err, status, e.Message, h)
	}
	return e
}

// quotaAPI reports an API error saying the spend limit, billing or credit
// is exhausted (lt and lc: the lower-case type and code), whatever its
// status.
func quotaAPI(status int, lt, lc, msg string) bool {
	return lt == "insufficient_quota" || lc == "insufficient_quota" || lt == "billing_error" ||
		status == http.StatusPaymentRequired || isQuotaMessage(msg)
}

// rateLimitedAPI reports an API error telling the caller to slow down: a
// 429, a rate limit error, or Anthropic's overloaded (529).
func rateLimitedAPI(status int, lt, lc string) bool {
	return status == http.StatusTooManyRequests || lt == "rate_limit_error" || lt == "rate_limit_exceeded" ||
		lc == "rate_limit_exceeded" || status == statusOverloaded || lt == "overloaded_error"
}

// transientAPI reports an API error a retry may fix: the server's error or
// timeout, a 408, a 409, or any 5xx.
func transientAPI(status int, lt string) bool {
	return lt == "api_error" || lt == "timeout_error" ||
		lt == "server_error" || status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500
}

// statusOverloaded is Anthropic's 529: the API is overloaded, slow down.
const statusOverloaded = 529

// malformed reports whether err is a response that did not parse: a body
// or a stream event that is not the JSON it should be (cut, garbled by a
// proxy). A request the client could not encode is no such thing.
func malformed(err error) bool {
	var me *json.MarshalerError
	if errors.As(err, &me) {
		return false
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &se) || errors.As(err, &te)
}

// classifyMessage classifies an error by its text alone.
func classifyMessage(err error, status int, msg string, h http.Header) *Error {
	e := &Error{StatusCode: status, Message: msg, Err: err}
	l := strings.ToLower(msg)
	switch {
	case isQuotaMessage(msg):
		e.Class, e.Quota = ClassPermanent, true
	case strings.Contains(l, "rate limit") || strings.Contains(l, "rate_limit") || strings.Contains(l, "too many requests"):
		e.Class = ClassRateLimited
		e.RetryAfter = retryAfter(h, time.Now())
	case strings.Contains(l, "overloaded") || strings.Contains(l, "timeout") || strings.Contains(l, "timed out") ||
		strings.Contains(l, "connection reset") || strings.Contains(l, "connection refused") ||
		strings.Contains(l, "unexpected eof") || strings.Contains(l, "server error"):
		e.Class = ClassTransient
	default:
		e.Class = ClassPermanent
	}
	return e
}

func isQuotaMessage(msg string) bool {
	l := strings.ToLower(msg)
	return strings.Contains(l, "insufficient_quota") || strings.Contains(l, "exceeded your current quota") ||
		strings.Contains(l, "credit balance") || strings.Contains(l, "billing")
}

// retryAfter reads retry-after-ms (milliseconds, may be fractional), then
// retry-after (seconds or an HTTP date), then the rate-limit headers: the
// latest reset of the limits the response says are exhausted (remaining
// 0), as OpenAI answers a 429 that has no retry-after. 0 when absent or
// unparsable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	d := retryAfterHeader(h, now)
	if d == 0 {
		d = rateLimitReset(h, now)
	}
	return d
}

// rateLimitResets are the pairs of headers, remaining and reset, of the
// limits a 429 may have hit: OpenAI's resets are durations ("1s", "6m0s"),
// Anthropic's RFC 3339 times.
var rateLimitResets = [][2]string{
	{"x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
	{"x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
	{"anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"},
	{"anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"},
	{"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset"},
	{"anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"},
}

// rateLimitReset is how long until the last exhausted limit of h resets.
func rateLimitReset(h http.Header, now time.Time) time.Duration {
	var latest time.Duration
	for _, p := range rateLimitResets {
		if strings.TrimSpace(h.Get(p[0])) != "0" {
			continue
		}
		v := strings.TrimSpace(h.Get(p[1]))
		d, err := time.ParseDuration(v)
		if err != nil {
			t, terr := time.Parse(time.RFC3339, v)
			if terr != nil {
				continue
			}
			d = t.Sub(now)
		}
		latest = max(latest, d)
	}
	return latest
}

func retryAfterHeader(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := strings.TrimSpace(h.Get("retry-after")); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		if t, err := http.ParseTime(v); err == nil && t.After(now) {
			return t.Sub(now)
		}
	}
	return 0
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// ctxError classifies err, preferring the context's own state: a call whose
// ctx was cancelled reports "cancelled" whatever the transport said.
func ctxError(ctx context.Context, err error) *Error {
	if cause := context.Cause(ctx); errors.Is(cause, errStalled) {
		return &Error{Class: ClassTransient, Message: cause.Error(), Err: errors.Join(cause, err)}
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.Canceled) {
			return &Error{Class: ClassCancelled, Message: "request cancelled", Err: errors.Join(cerr, err)}
		}
		return &Error{Class: ClassTransient, Message: "request timed out", Err: errors.Join(cerr, err)}
	}
	return Classify(err)
}

// streamEnd is the error of a stream that stopped, nil when it ended
// well: the stream's own error, the context's, or, when the stream did not
// end with its last event (ended false), a transient error saying how it
// ended (missing: "before message_stop").
func streamEnd(ctx context.Context, streamErr error, ended bool, missing string) error {
	if streamErr != nil {
		return ctxError(ctx, streamErr)
	}
	if err := ctx.Err(); err != nil {
		return ctxError(ctx, err)
	}
	if !ended {
		err := errors.New("stream ended " + missing)
		return &Error{Class: ClassTransient, Message: err.Error(), Err: err}
	}
	return nil
}

// withKeyHint points a 401 or 403 at the API key, keyVar, that the worker
// sent: the error stays permanent, and says where to look.
func withKeyHint(err error, keyVar string) error {
	var pe *Error
	if !errors.As(err, &pe) || (pe.StatusCode != http.StatusUnauthorized && pe.StatusCode != http.StatusForbidden) {
		return err
	}
	c := *pe
	if c.Message == "" && c.Err != nil {
		c.Message = oneLine(c.Err.Error())
	}
	c.Message = strings.TrimSpace(c.Message + " (check " + keyVar + " on the worker)")
	return &c
}
