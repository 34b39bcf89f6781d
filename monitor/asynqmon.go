package monitor

import (
	"bytes"
	"net/http"
	"regexp"
	"strconv"
	"strings"

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
func NewAsynqmon(rdb redis.UniversalClient, root string, readOnly bool) http.Handler {
	h := asynqmon.New(asynqmon.Options{RootPath: root, RedisConnOpt: sharedConn{rdb}, ReadOnly: readOnly})
	api := strings.TrimSuffix(root, "/") + "/api/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, api) {
			h.ServeHTTP(w, r)
			return
		}
		sw := &htmlRewriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		sw.finish()
	})
}

var externalFonts = regexp.MustCompile(`<link[^>]*href="https://fonts\.googleapis\.com/[^"]*"[^>]*>`)

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
