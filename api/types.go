package api

import "github.com/spool-run/spool/spooltype"

// The bodies of the API's requests and its stream's end message are the
// API's wire types (package spooltype), which a client uses without
// linking the server.
type (
	// RunRequest is the body of POST /v1/threads.
	RunRequest = spooltype.RunRequest
	// CancelRequest is the (optional) body of POST /v1/threads/ID/cancel.
	CancelRequest = spooltype.CancelRequest
	// PauseRequest is the (optional) body of POST /v1/threads/ID/pause
	// and /unpause (and of the same routes of a graph run).
	PauseRequest = spooltype.PauseRequest
	// ResumeRequest is the body of POST /v1/threads/ID/resume.
	ResumeRequest = spooltype.ResumeRequest
	// ApproveRequest is the (optional) body of POST /v1/threads/ID/approve.
	ApproveRequest = spooltype.ApproveRequest
	// DenyRequest is the body of POST /v1/threads/ID/deny.
	DenyRequest = spooltype.DenyRequest
	// SendRequest is the body of POST /v1/threads/ID/send and /interrupt.
	SendRequest = spooltype.SendRequest
	// GraphMessageRequest is the body of POST /v1/graphs/ID/messages.
	GraphMessageRequest = spooltype.GraphMessageRequest
	// ForkRequest is the body of POST /v1/threads/ID/fork.
	ForkRequest = spooltype.ForkRequest
	// End is the data of the "end" message that closes an event stream.
	End = spooltype.End
)
