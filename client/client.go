// Package client is a Go client of spool's HTTP API (package api, `spool
// api`). Its requests and results are the API's wire types, package
// spooltype: the types the CLI prints with --json (Record, TreeNode,
// Chain, Budget, CancelResult, PauseResult, ResumeResult, Event); an
// error response is a *spooltype.Problem (errors.As), with the HTTP
// status and spool's code. Events reads a thread's transcript as
// server-sent events and resumes after the last event it got when the
// connection drops; EventsWith with an OnDelta also passes it the
// model's words as they are written (spooltype.Delta). It imports no other package of spool's than
// spooltype (and thread), so a program that uses it links none of the
// server: no Redis client, no asynq, no Lua.
//
//	c, err := client.New("http://127.0.0.1:8081", client.WithToken(token))
//	rec, err := c.Run(ctx, spooltype.RunRequest{Directive: "demo/hello", Inputs: map[string]any{"name": "Ada"}})
//	s := c.Events(ctx, rec.ThreadID, 0)
//	defer s.Close()
//	for {
//		ev, err := s.Next()
//		if err == io.EOF {
//			break // the thread has finished: s.End() says how
//		}
//		...
//	}
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spool-run/spool/spooltype"
)

// Client calls one spool API server. It is safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
	auth func(*http.Request)
}

// Option configures a Client.
type Option func(*Client)

// WithToken authenticates with "Authorization: Bearer token".
func WithToken(token string) Option {
	return func(c *Client) {
		c.auth = func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	}
}

// WithBasicAuth authenticates with HTTP basic auth.
func WithBasicAuth(user, password string) Option {
	return func(c *Client) { c.auth = func(r *http.Request) { r.SetBasicAuth(user, password) } }
}

// WithHTTPClient makes the requests with hc. Default: a client without a
// timeout (an event stream lasts as long as its thread; bound calls with
// their context).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8081").
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://HOST[:PORT]", baseURL)
	}
	c := &Client{base: u, hc: &http.Client{}, auth: func(*http.Request) {}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// threadPath is the path of thread id's route action ("" for the thread).
func threadPath(id, action string) string {
	p := "/v1/threads/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// request builds a request of path (escaped, with an optional query).
func (c *Client) request(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u, err := url.Parse(c.base.String() + path) // path is escaped: parsing keeps it so
	if err != nil {
		return nil, err
	}
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	c.auth(req)
	return req, nil
}

// do sends a request and decodes a response of status want into out.
// call is do for a call that answers with a T.
func call[T any](ctx context.Context, c *Client, method, path string, body any, want int) (*T, error) {
	var v T
	if err := c.do(ctx, method, path, nil, body, &v, want); err != nil {
		return nil, err
	}
	return &v, nil
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any, want int) error {
	req, err := c.request(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return readProblem(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the response: %w", method, path, err)
	}
	return nil
}

// readProblem reads an error response as an *spooltype.Problem (one made up
// from the status when the body is not a problem).
func readProblem(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	p := &spooltype.Problem{}
	if mt == spooltype.ProblemType && json.Unmarshal(b, p) == nil && p.Status != 0 {
		return p
	}
	return &spooltype.Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode,
		Detail: fmt.Sprintf("%s %s: %s: %s", resp.Request.Method, resp.Request.URL.Path, resp.Status, strings.TrimSpace(string(b)))}
}

// Run starts a thread (POST /v1/threads) and returns its record.
func (c *Client) Run(ctx context.Context, req spooltype.RunRequest) (*spooltype.Record, error) {
	return call[spooltype.Record](ctx, c, http.MethodPost, "/v1/threads", req, http.StatusCreated)
}

// ListOptions filter List. Zero fields match everything.
type ListOptions struct {
	Status    string
	Directive string
	Parent    string
	// Limit is how many threads at most; 0: the server's default (100).
	Limit int
}

// List returns the threads that match o, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) ([]*spooltype.Record, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": o.Status, "directive": o.Directive, "parent": o.Parent} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var recs []*spooltype.Record
	if err := c.do(ctx, http.MethodGet, "/v1/threads", q, nil, &recs, http.StatusOK); err != nil {
		return nil, err
	}
	return recs, nil
}

// Show returns thread id's record.
func (c *Client) Show(ctx context.Context, id string) (*spooltype.Record, error) {
	return call[spooltype.Record](ctx, c, http.MethodGet, threadPath(id, ""), nil, http.StatusOK)
}

// Tree returns thread id's children and continuations.
func (c *Client) Tree(ctx context.Context, id string) (*spooltype.TreeNode, error) {
	return call[spooltype.TreeNode](ctx, c, http.MethodGet, threadPath(id, "tree"), nil, http.StatusOK)
}

// Chain returns thread id's continuation chain.
func (c *Client) Chain(ctx context.Context, id string) (*spooltype.Chain, error) {
	return call[spooltype.Chain](ctx, c, http.MethodGet, threadPath(id, "chain"), nil, http.StatusOK)
}

// Budget returns the live budget of thread id's subtree.
func (c *Client) Budget(ctx context.Context, id string) (*spooltype.Budget, error) {
	return call[spooltype.Budget](ctx, c, http.MethodGet, threadPath(id, "budget"), nil, http.StatusOK)
}

// Cancel cancels the thread id's chain has reached; cascade cancels its
// children too (as the project's child policy says).
func (c *Client) Cancel(ctx context.Context, id string, cascade bool) (*spooltype.CancelResult, error) {
	return call[spooltype.CancelResult](ctx, c, http.MethodPost, threadPath(id, "cancel"), spooltype.CancelRequest{Cascade: &cascade}, http.StatusOK)
}

// Pause pauses the thread id's chain has reached and its unfinished
// descendants (tree: the whole tree id belongs to, from its root): a
// waiting one at once, a running one at its next boundary. A run that has
// ended is an *spooltype.Problem 409 (run_ended).
func (c *Client) Pause(ctx context.Context, id string, tree bool) (*spooltype.PauseResult, error) {
	return call[spooltype.PauseResult](ctx, c, http.MethodPost, threadPath(id, "pause"), spooltype.PauseRequest{Tree: tree}, http.StatusOK)
}

// Unpause lets the thread id's chain has reached and its unfinished
// descendants (tree: the whole tree id belongs to, from its root) go on
// where they were. A run that has ended is an *spooltype.Problem 409
// (run_ended).
func (c *Client) Unpause(ctx context.Context, id string, tree bool) (*spooltype.PauseResult, error) {
	return call[spooltype.PauseResult](ctx, c, http.MethodPost, threadPath(id, "unpause"), spooltype.PauseRequest{Tree: tree}, http.StatusOK)
}

// Resume resumes a finished thread with a user message.
func (c *Client) Resume(ctx context.Context, id, message string) (*spooltype.ResumeResult, error) {
	return call[spooltype.ResumeResult](ctx, c, http.MethodPost, threadPath(id, "resume"), spooltype.ResumeRequest{Message: message}, http.StatusCreated)
}

// Approve approves thread id's pending tool calls. Not implemented by the
// server yet: an *spooltype.Problem with status 501.
func (c *Client) Approve(ctx context.Context, id string, req spooltype.ApproveRequest) error {
	return c.do(ctx, http.MethodPost, threadPath(id, "approve"), nil, req, &json.RawMessage{}, http.StatusOK)
}

// Deny denies thread id's pending tool calls. Not implemented by the
// server yet: an *spooltype.Problem with status 501.
func (c *Client) Deny(ctx context.Context, id string, req spooltype.DenyRequest) error {
	return c.do(ctx, http.MethodPost, threadPath(id, "deny"), nil, req, &json.RawMessage{}, http.StatusOK)
}

// Send queues a message for thread id's model. Not implemented by the
// server yet: an *spooltype.Problem with status 501.
func (c *Client) Send(ctx context.Context, id string, req spooltype.SendRequest) error {
	return c.do(ctx, http.MethodPost, threadPath(id, "send"), nil, req, &json.RawMessage{}, http.StatusOK)
}

// Fork starts a thread from a verified prefix of thread id. Not
// implemented by the server yet: an *spooltype.Problem with status 501.
func (c *Client) Fork(ctx context.Context, id string, req spooltype.ForkRequest) (*spooltype.Record, error) {
	return call[spooltype.Record](ctx, c, http.MethodPost, threadPath(id, "fork"), req, http.StatusCreated)
}

// IsStatus reports whether err is an API problem of HTTP status code.
func IsStatus(err error, code int) bool {
	var p *spooltype.Problem
	return errors.As(err, &p) && p.Status == code
}
