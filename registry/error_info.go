package registry

import "strings"

// Tidy returns the error with a message that does not repeat its code:
// a limit error's text begins with its code ("spend_exceeded: 0.6 of
// 0.5") and a provider error's with its class ("provider transient: HTTP
// 503: overloaded" under provider_transient), which "code: message" would
// say twice. Nil stays nil.
func (e *ErrorInfo) Tidy() *ErrorInfo {
	if e == nil {
		return nil
	}
	msg := e.Message
	spaced := strings.ReplaceAll(e.Code, "_", " ")
	for e.Code != "" {
		rest, ok := strings.CutPrefix(msg, e.Code+": ")
		if !ok {
			rest, ok = strings.CutPrefix(msg, spaced+": ")
		}
		if !ok || strings.TrimSpace(rest) == "" {
			break
		}
		msg = rest
	}
	return &ErrorInfo{Code: e.Code, Message: msg}
}

// Line is the error as one line, "code: message", each said once.
func (e *ErrorInfo) Line() string {
	t := e.Tidy()
	if t.Message == "" {
		return t.Code
	}
	return t.Code + ": " + t.Message
}
