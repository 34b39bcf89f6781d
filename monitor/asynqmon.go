package monitor

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"
)

// sharedConn hands asynqmon an existing client: asynqmon builds its Redis
// client and its asynq.Inspector from a RedisConnOpt, and both accept
// whatever MakeRedisClient returns. The handler is never Closed, so the
// shared client stays open for its owner.
type sharedConn struct{ c redis.UniversalClient }

func (s sharedConn) MakeRedisClient() any { return s.c }

// NewAsynqmon returns asynqmon serving under root (e.g. AsynqPath) over an
// existing Redis client, which it shares and never closes. readOnly hides
// its buttons that change queues. Its index page's links to Google Fonts are
// removed, so the UI loads nothing from the internet (it falls back to the
// browser's sans-serif; its icons are inline SVG).
//
// Its index page also loads the monitor's /static/asynqmon.js (and .css):
// a bar that links back to the thread views (and, on a task's page, to
// the thread the task activates), and a fix for task ids with slashes,
// which every thread id of a directive in a category has: asynqmon links
// to such a task unescaped, where its router finds no route, so the script
// escapes the id; and asynqmon's API cannot look such a task up (its
// router matches the unescaped path), so the lookup is answered here, in
// asynqmon's JSON.
func NewAsynqmon(rdb redis.UniversalClient, root string, readOnly bool) http.Handler {
	h := asynqmon.New(asynqmon.Options{RootPath: root, RedisConnOpt: sharedConn{rdb}, ReadOnly: readOnly})
	api := strings.TrimSuffix(root, "/") + "/api/"
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, api) {
			if q, id, ok := slashedTask(strings.TrimPrefix(r.URL.Path, api)); ok && r.Method == http.MethodGet {
				serveTaskInfo(w, inspector, q, id)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		sw := &htmlRewriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		sw.finish()
	})
}

var externalFonts = regexp.MustCompile(`<link[^>]*href="https://fonts\.googleapis\.com/[^"]*"[^>]*>`)

// asynqmonAdditions go at the end of asynqmon's <head>, after the inline
// script that sets its root path.
const asynqmonAdditions = `<link rel="stylesheet" href="/static/asynqmon.css"><script src="/static/asynqmon.js"></script>`

// slashedTask parses asynqmon's task lookup, "queues/Q/tasks/ID" under its
// API root, for an ID that holds a slash (asynqmon's router finds no route
// for it).
func slashedTask(rest string) (q, id string, ok bool) {
	rest, ok = strings.CutPrefix(rest, "queues/")
	if !ok {
		return "", "", false
	}
	q, id, ok = strings.Cut(rest, "/tasks/")
	if !ok || q == "" || strings.Contains(q, "/") || !strings.Contains(id, "/") {
		return "", "", false
	}
	return q, id, true
}

// taskInfo is asynqmon's JSON of a task (its task details page reads it).
type taskInfo struct {
	ID            string `json:"id"`
	Queue         string `json:"queue"`
	Type          string `json:"type"`
	Payload       string `json:"payload"`
	State         string `json:"state"`
	MaxRetry      int    `json:"max_retry"`
	Retried       int    `json:"retried"`
	LastErr       string `json:"error_message"`
	LastFailedAt  string `json:"last_failed_at"`
	Timeout       int    `json:"timeout_seconds"`
	Deadline      string `json:"deadline"`
	NextProcessAt string `json:"next_process_at"`
	CompletedAt   string `json:"completed_at"`
	Result        string `json:"result"`
	TTL           int64  `json:"ttl_seconds"`
}

func serveTaskInfo(w http.ResponseWriter, in *asynq.Inspector, q, id string) {
	info, err := in.GetTaskInfo(q, id)
	switch {
	case errors.Is(err, asynq.ErrQueueNotFound), errors.Is(err, asynq.ErrTaskNotFound):
		http.Error(w, strings.TrimPrefix(err.Error(), "asynq: "), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, strings.TrimPrefix(err.Error(), "asynq: "), http.StatusInternalServerError)
		return
	}
	rfc := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339)
	}
	var ttl time.Duration
	if info.State == asynq.TaskStateCompleted {
		ttl = time.Until(info.CompletedAt.Add(info.Retention))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(taskInfo{ID: info.ID, Queue: info.Queue, Type: info.Type,
		Payload: asynqmon.DefaultPayloadFormatter.FormatPayload(info.Type, info.Payload), State: info.State.String(),
		MaxRetry: info.MaxRetry, Retried: info.Retried, LastErr: info.LastErr, LastFailedAt: rfc(info.LastFailedAt),
		Timeout: int(info.Timeout.Seconds()), Deadline: rfc(info.Deadline), NextProcessAt: rfc(info.NextProcessAt),
		CompletedAt: rfc(info.CompletedAt), Result: asynqmon.DefaultResultFormatter.FormatResult("", info.Result), TTL: int64(ttl.Seconds())})
}

// htmlRewriter buffers an HTML response (asynqmon's index, which it writes
// without a Content-Type) and strips external font links from it; any
// other response passes through untouched.
type htmlRewriter struct {
	http.ResponseWriter
	decided bool
	buf     *bytes.Buffer
	code    int
}

func (h *htmlRewriter) WriteHeader(code int) {
	if h.decided && h.buf == nil {
		h.ResponseWriter.WriteHeader(code)
		return
	}
	h.code = code
}

func (h *htmlRewriter) Write(p []byte) (int, error) {
	if !h.decided {
		h.decided = true
		ct := h.Header().Get("Content-Type")
		if strings.HasPrefix(ct, "text/html") || ct == "" && looksHTML(p) {
			h.buf = &bytes.Buffer{}
		} else if h.code != 0 {
			h.ResponseWriter.WriteHeader(h.code)
		}
	}
	if h.buf != nil {
		return h.buf.Write(p)
	}
	return h.ResponseWriter.Write(p)
}

func (h *htmlRewriter) finish() {
	if h.buf == nil {
		if !h.decided && h.code != 0 {
			h.ResponseWriter.WriteHeader(h.code)
		}
		return
	}
	out := externalFonts.ReplaceAll(h.buf.Bytes(), nil)
	out = bytes.Replace(out, []byte("</head>"), []byte(asynqmonAdditions+"</head>"), 1)
	hd := h.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Length", strconv.Itoa(len(out)))
	if h.code != 0 {
		h.ResponseWriter.WriteHeader(h.code)
	}
	_, _ = h.ResponseWriter.Write(out)
}

func looksHTML(p []byte) bool {
	s := strings.ToLower(string(p[:min(len(p), 64)]))
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "<!doctype html") || strings.HasPrefix(s, "<html")
}
