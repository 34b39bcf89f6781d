// Package spawn lets the process of an external tool start child threads
// of the thread that called it, without any of the worker's credentials.
//
// A tool may run `spool thread run DIRECTIVE` to start a child. That used
// to need what the CLI needs to enqueue: the Redis URL (with its password),
// the S3 credentials, the signing key's path; all of it was in the tool's
// environment, readable by any project tool. Instead, for each external
// tool call the worker serves a unix socket in the call's private working
// directory (mode 0700) and gives the process two variables:
//
//	SPOOL_SPAWN_SOCKET   the socket's path
//	SPOOL_SPAWN_TOKEN    a random 256-bit token for this call only
//
// `spool thread run` finds them and asks the worker, over the socket, to
// start the thread; the worker starts it with its own connections as a
// child of the calling thread (the parent is not the caller's to choose),
// under the same limits, spawn counts and budget as any child, and can
// wait for it. The grant is scoped to one thread and one call: the token
// only starts children of the calling thread and only waits on threads
// whose parent it is, and the socket closes, and the token dies, when the
// call returns (its process group is killed then too). Nothing secret
// reaches the tool: a leaked token is worth one call's children.
//
// The wire is HTTP/1.1 over the socket, JSON both ways, the token as a
// bearer token:
//
//	POST /v1/start  Request             -> the child's registry record
//	POST /v1/wait   {ids, timeout_ms}   -> {id: final record} (chains followed)
//
// An error is a status other than 200 with {"error": "..."}.
package spawn

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The variables a tool process gets.
const (
	SocketEnv = "SPOOL_SPAWN_SOCKET"
	TokenEnv  = "SPOOL_SPAWN_TOKEN"
)

// Request asks for a child thread of the calling thread.
type Request struct {
	Directive string         `json:"directive"`
	Inputs    map[string]any `json:"inputs,omitempty"`
	Model     string         `json:"model,omitempty"`
	// Limits are overrides as name=value (thread.Limits.SetLimit).
	Limits []string `json:"limits,omitempty"`
	Queue  string   `json:"queue,omitempty"`
}

// waitRequest asks for the final records of threads.
type waitRequest struct {
	IDs       []string `json:"ids"`
	TimeoutMS int64    `json:"timeout_ms"`
}

// Handler does what a tool's process asks, for one calling thread. Its
// errors go back to the process as messages.
type Handler interface {
	// Start starts a child of the calling thread and returns its record.
	Start(ctx context.Context, req Request) (any, error)
	// Wait waits for children of the calling thread and returns their
	// final records by id; a thread that is not a child is an error.
	Wait(ctx context.Context, ids []string, timeout time.Duration) (any, error)
}

// Serve serves h on a new socket in dir (which should be private to the
// call) and returns the environment the tool's process gets and a stop
// that closes the socket and waits for the requests in flight.
func Serve(dir string, h Handler, log *slog.Logger) (env map[string]string, stop func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := filepath.Join(dir, "spawn.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("spawn socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("spawn socket: %w", err)
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	token := hex.EncodeToString(raw[:])
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/start", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if !decode(w, r, &req) {
			return
		}
		rec, err := h.Start(r.Context(), req)
		reply(w, rec, err)
	})
	mux.HandleFunc("POST /v1/wait", func(w http.ResponseWriter, r *http.Request) {
		var req waitRequest
		if !decode(w, r, &req) {
			return
		}
		recs, err := h.Wait(r.Context(), req.IDs, time.Duration(req.TimeoutMS)*time.Millisecond)
		reply(w, recs, err)
	})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, []byte("Bearer "+token)) != 1 {
				writeError(w, http.StatusUnauthorized, "spawn: bad or expired token")
				return
			}
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("spawn socket", "error", err)
		}
	}()
	stop = func() {
		// Close, not Shutdown: a wait in flight ends with the call.
		_ = srv.Close()
		<-done
		_ = os.Remove(path)
	}
	return map[string]string{SocketEnv: path, TokenEnv: token}, stop, nil
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "spawn: bad request: "+err.Error())
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// Client asks the worker that runs the current tool call.
type Client struct {
	socket, token string
	http          *http.Client
}

// FromEnv returns the client of the current tool call, or nil outside one
// (SPOOL_SPAWN_SOCKET and SPOOL_SPAWN_TOKEN unset).
func FromEnv() *Client {
	socket, token := os.Getenv(SocketEnv), os.Getenv(TokenEnv)
	if socket == "" || token == "" {
		return nil
	}
	return NewClient(socket, token)
}

// NewClient returns a client of the socket, with token.
func NewClient(socket, token string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, token: token, http: &http.Client{Transport: tr}}
}

// Start starts a child of the calling thread and returns its record (the
// registry record's JSON).
func (c *Client) Start(ctx context.Context, req Request) (json.RawMessage, error) {
	return c.post(ctx, "/v1/start", req)
}

// Wait waits up to timeout for threads (children of the calling thread)
// and returns their final records by id, as JSON.
func (c *Client) Wait(ctx context.Context, ids []string, timeout time.Duration) (json.RawMessage, error) {
	return c.post(ctx, "/v1/wait", waitRequest{IDs: ids, TimeoutMS: timeout.Milliseconds()})
}

func (c *Client) post(ctx context.Context, path string, body any) (json.RawMessage, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://spool-worker"+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the worker running this tool (%s): %w", c.socket, err)
	}
	defer resp.Body.Close()
	var out json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("the worker running this tool: reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(out, &e)
		return nil, errors.New(e.Error)
	}
	return out, nil
}
