package spooltype

import "fmt"

// ProblemType is the media type of an error response (RFC 9457).
const ProblemType = "application/problem+json"

// Problem is an RFC 9457 problem detail, with spool's "code" member: the
// body of every error response, and the error the client returns for one.
type Problem struct {
	// Type is "about:blank": the status and Code say what happened.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`
	// Code is the machine-readable reason (package api's doc lists them).
	Code string `json:"code"`
	// RetryAfter is the response's Retry-After (seconds; 0: none): when
	// what refused has room again.
	RetryAfter int `json:"-"`
}

func (p *Problem) Error() string {
	if p.Detail != "" {
		return p.Detail
	}
	return fmt.Sprintf("%d %s", p.Status, p.Title)
}
