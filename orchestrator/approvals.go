package orchestrator

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// PendingCall is a tool call waiting for a person's decision, as `spool
// thread approvals --json` prints it.
type PendingCall struct {
	ThreadID    string          `json:"thread_id"`
	Directive   string          `json:"directive"`
	CallID      string          `json:"call_id"`
	Tool        string          `json:"tool"`
	Input       json.RawMessage `json:"input"`
	RequestedAt time.Time       `json:"requested_at"`
	Deadline    time.Time       `json:"deadline,omitzero"`
	// OnTimeout is what Deadline decides: "deny" or "approve" (approvals.yaml).
	OnTimeout string `json:"on_timeout,omitempty"`
	// RequestID names this request for a decision (call ids repeat
	// across a chain): DecideRequest decides it and nothing else.
	RequestID string `json:"request_id,omitempty"`
}

// PendingCallOf is thread threadID's pending call p, of directive
// directive.
func PendingCallOf(threadID, directive string, p registry.PendingApproval) PendingCall {
	return PendingCall{ThreadID: threadID, Directive: directive, CallID: p.CallID, Tool: p.Tool, Input: p.Input,
		RequestedAt: p.RequestedAt, Deadline: p.Deadline, OnTimeout: p.OnTimeout, RequestID: p.RequestID}
}

// GraphApprovalTool is the tool of a graph run's approval node's pending
// call (any other tool of a run's is a tool call approvals.yaml gates).
const GraphApprovalTool = "graph:approval"

// NodeRequest is what a graph run's approval node asks a person: its
// prompt, and its show (nil, or any JSON value: an object, key by key).
type NodeRequest struct {
	Prompt string
	Show   any
}

// ReadNodeRequest reads an approval node's call's input ({prompt, show});
// false when it does not read so (surfaces show the input as JSON then).
func ReadNodeRequest(input json.RawMessage) (NodeRequest, bool) {
	var in struct {
		Prompt *string `json:"prompt"`
		Show   any     `json:"show"`
	}
	if json.Unmarshal(input, &in) != nil || in.Prompt == nil {
		return NodeRequest{}, false
	}
	return NodeRequest{Prompt: *in.Prompt, Show: in.Show}, true
}

// ShowEntry is one entry of an approval node's show: a key of an object
// show and its value, or a show that is no object under the key "".
type ShowEntry struct {
	Key   string
	Value any
}

// Entries is r's show as surfaces list it: an object key by key, in key
// order; any other value as one entry without a key; none for no show.
func (r NodeRequest) Entries() []ShowEntry {
	switch show := r.Show.(type) {
	case nil:
		return nil
	case map[string]any:
		keys := make([]string, 0, len(show))
		for k := range show {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]ShowEntry, 0, len(keys))
		for _, k := range keys {
			out = append(out, ShowEntry{Key: k, Value: show[k]})
		}
		return out
	}
	return []ShowEntry{{Value: r.Show}}
}

// Approvals lists the undecided tool calls of the threads waiting for
// approval (only) id's when id is not empty, oldest request first.
func (o *Orchestrator) Approvals(ctx context.Context, id string) ([]PendingCall, error) {
	ids := []string{id}
	if id == "" {
		var err error
		if ids, err = o.acts.AwaitingApproval(ctx); err != nil {
			return nil, err
		}
	}
	out := []PendingCall{}
	for _, tid := range ids {
		var err error
		if out, err = o.threadApprovals(ctx, tid, id == "", out); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].RequestedAt.Before(out[j].RequestedAt) })
	return out, nil
}

// threadApprovals appends to out the undecided calls of thread tid, when
// it waits for approval. Listing every waiting thread's (all), it
// forgets a thread that is gone or finished from the set of those
// awaiting approval.
func (o *Orchestrator) threadApprovals(ctx context.Context, tid string, all bool, out []PendingCall) ([]PendingCall, error) {
	rec, err := o.reg.Get(ctx, tid)
	if errors.Is(err, registry.ErrNotFound) && all {
		_ = o.acts.ForgetAwaiting(ctx, tid)
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	if rec.Status != thread.StatusWaiting || rec.WaitingFor != registry.WaitingForApproval {
		if all && rec.Status.Terminal() {
			_ = o.acts.ForgetAwaiting(ctx, tid)
		}
		return out, nil
	}
	decided, err := o.acts.Decisions(ctx, tid)
	if err != nil {
		return nil, err
	}
	for _, p := range rec.PendingApprovals {
		if d, ok := decided[p.CallID]; ok && (d.RequestID == "" || d.RequestID == p.RequestID) {
			continue
		}
		out = append(out, PendingCallOf(tid, rec.Directive, p))
	}
	return out, nil
}

// DecideResult is what a decision did.
type DecideResult struct {
	ThreadID string   `json:"thread_id"`
	Decision string   `json:"decision"`
	Calls    []string `json:"calls"`
	By       string   `json:"by"`
	Reason   string   `json:"reason,omitempty"`
	// Woken: no call is left undecided and the thread was re-enqueued.
	Woken bool `json:"woken"`
}

// Decide approves or denies (decision registry.DecisionApprove or
// DecisionDeny) the pending calls of thread id that calls names, and
// wakes the thread when none is left undecided. A named call is one of
// thread id itself: call ids repeat across a continuation chain, so the
// chain is not followed; without calls, every pending call of the
// thread the chain of id has reached is decided. registry.ErrNotPending
// when nothing matching waits for a decision.
func (o *Orchestrator) Decide(ctx context.Context, id string, calls []string, decision, by, reason string) (*DecideResult, error) {
	if strings.TrimSpace(by) == "" {
		return nil, errors.New("decide: who decides (by) is required")
	}
	target := id
	if len(calls) == 0 {
		resolved, err := o.reg.ResolveChain(ctx, id)
		if err != nil {
			return nil, err
		}
		target = resolved
	} else if _, err := o.reg.Get(ctx, id); err != nil {
		return nil, err
	}
	return o.decide(ctx, target, decision, by, reason, func(d registry.Decision) ([]string, *registry.Wake, error) {
		return o.acts.Decide(ctx, target, calls, d)
	})
}

// DecideRequest decides one request for a decision: call callID of
// thread id (exactly that thread, never its continuation) while its
// pending request is requestID (PendingCall.RequestID), so a decision
// made for one request never lands on a later request of the same call
// id. registry.ErrNotPending when that request no longer waits.
func (o *Orchestrator) DecideRequest(ctx context.Context, id, callID, requestID, decision, by, reason string) (*DecideResult, error) {
	if strings.TrimSpace(by) == "" {
		return nil, errors.New("decide: who decides (by) is required")
	}
	if _, err := o.reg.Get(ctx, id); err != nil {
		return nil, err
	}
	return o.decide(ctx, id, decision, by, reason, func(d registry.Decision) ([]string, *registry.Wake, error) {
		return o.acts.DecideRequest(ctx, id, callID, requestID, d)
	})
}

// decide records decision on thread id with record, and wakes the thread
// when the decision left nothing undecided.
func (o *Orchestrator) decide(ctx context.Context, id, decision, by, reason string,
	record func(registry.Decision) ([]string, *registry.Wake, error)) (*DecideResult, error) {
	d := registry.Decision{Decision: decision, By: by, Reason: reason, At: o.Now().UTC()}
	decided, wake, err := record(d)
	if err != nil {
		return nil, err
	}
	res := &DecideResult{ThreadID: id, Decision: decision, Calls: decided, By: by, Reason: reason}
	if wake != nil {
		if err := o.enqueueWake(ctx, *wake); err != nil {
			return nil, err
		}
		res.Woken = true
	}
	o.threadLog(id).Info("tool calls decided", "decision", decision, "calls", decided, "by", by)
	return res, nil
}

// DecisionToken is what a one-time approve or deny link carries (the
// approval webhook sends one of each per pending call).
type DecisionToken struct {
	ThreadID string `json:"t"`
	CallID   string `json:"c"`
	// RequestID is the request the link was made for
	// (registry.PendingApproval.RequestID): the link decides that
	// request of that call of that thread, nothing else.
	RequestID string `json:"r,omitempty"`
	Decision  string `json:"d"`
	Expires   int64  `json:"e"` // unix seconds
}

// SignDecisionToken returns tok signed with secret (the project's
// approvals.yaml notify.secret): base64url(JSON) "." base64url(HMAC-SHA256).
func SignDecisionToken(tok DecisionToken, secret string) string {
	body, _ := json.Marshal(tok)
	p := base64.RawURLEncoding.EncodeToString(body)
	return p + "." + base64.RawURLEncoding.EncodeToString(tokenMAC(p, secret))
}

func tokenMAC(payload, secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("spool-decision." + payload))
	return m.Sum(nil)
}

// ErrBadToken means a decision link's token does not verify or has expired.
var ErrBadToken = errors.New("the decision link is not valid (expired, altered, or not this project's)")

// DecideByToken applies the decision a signed one-time link carries. The
// token is checked with the notify secret of the thread's own project
// (its bundle), and decides the request it was made for only (the
// thread it names, never that thread's continuation; the call's request
// id): a second use, or a use after the call was decided otherwise or
// asked again, finds nothing pending (registry.ErrNotPending).
func (o *Orchestrator) DecideByToken(ctx context.Context, token, reason string) (*DecideResult, error) {
	tok, err := o.VerifyDecisionToken(ctx, token)
	if err != nil {
		return nil, err
	}
	return o.DecideRequest(ctx, tok.ThreadID, tok.CallID, tok.RequestID, tok.Decision, "link", reason)
}

// LinkedCall is the pending call a verified link's token decides, nil
// when its request no longer waits for a decision (decided, asked again,
// or the thread moved on).
func (o *Orchestrator) LinkedCall(ctx context.Context, tok *DecisionToken) (*PendingCall, error) {
	calls, err := o.Approvals(ctx, tok.ThreadID)
	if err != nil {
		return nil, err
	}
	for _, c := range calls {
		if c.ThreadID == tok.ThreadID && c.CallID == tok.CallID && c.RequestID == tok.RequestID {
			return &c, nil
		}
	}
	return nil, nil
}

// VerifyDecisionToken checks a one-time link's token as DecideByToken does
// and returns what it carries, deciding nothing (a confirmation page shows
// the call before a person confirms). ErrBadToken when it does not verify
// or has expired.
func (o *Orchestrator) VerifyDecisionToken(ctx context.Context, token string) (*DecisionToken, error) {
	payload, sig, ok := strings.Cut(token, ".")
	if !ok {
		return nil, ErrBadToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, ErrBadToken
	}
	var tok DecisionToken
	if err := json.Unmarshal(raw, &tok); err != nil || tok.ThreadID == "" || tok.CallID == "" {
		return nil, ErrBadToken
	}
	rec, err := o.reg.Get(ctx, tok.ThreadID)
	if err != nil {
		return nil, ErrBadToken
	}
	proj, err := o.Project(ctx, rec.Bundle)
	if err != nil {
		return nil, err
	}
	n := NotifyConfig(proj.Approvals)
	want := tokenMAC(payload, n.Secret)
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if n.Secret == "" || err != nil || !hmac.Equal(got, want) || o.Now().Unix() > tok.Expires {
		return nil, ErrBadToken
	}
	return &tok, nil
}

// NotifyConfig is a project's approval webhook with ${VAR} references in
// its url and secret expanded from the environment of the process that
// reads it (so the secret need not be in the project's files); a zero
// value when there is none.
func NotifyConfig(a *config.Approvals) config.Notify {
	if a == nil || a.Notify == nil {
		return config.Notify{}
	}
	return config.Notify{URL: os.ExpandEnv(a.Notify.URL), Secret: os.ExpandEnv(a.Notify.Secret), Links: os.ExpandEnv(a.Notify.Links)}
}

// DecisionLinks returns the one-time approve and deny links of thread
// threadID's pending call p under base (the address of `spool api` or the
// monitor), valid until expires and bound to p's request.
func DecisionLinks(base, threadID string, p registry.PendingApproval, secret string, expires time.Time) (approve, deny string) {
	link := func(d string) string {
		tok := DecisionToken{ThreadID: threadID, CallID: p.CallID, RequestID: p.RequestID, Decision: d, Expires: expires.Unix()}
		return fmt.Sprintf("%s/v1/approvals/decide?token=%s", strings.TrimRight(base, "/"), SignDecisionToken(tok, secret))
	}
	return link(registry.DecisionApprove), link(registry.DecisionDeny)
}
