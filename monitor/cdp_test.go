package monitor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/spool-run/spool/internal/testenv"
)

// This file is a small Chrome DevTools Protocol client: enough to drive a
// real headless Chromium through pages, evaluate expressions in them and
// take screenshots, without a browser-automation dependency.

// findChromium returns the browser binary: $SPOOL_TEST_CHROMIUM, or
// chromium / chromium-browser / google-chrome on PATH. With none, the test
// skips, or fails under SPOOL_TEST_REQUIRE_REAL=1 (CI installs Debian's
// chromium with .ci/browser).
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SPOOL_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testenv.RequireReal() {
		t.Fatal("no chromium on PATH, and SPOOL_TEST_REQUIRE_REAL=1: run .ci/browser (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or set SPOOL_TEST_CHROMIUM)")
	return ""
}

// browser is a headless Chromium with its DevTools endpoint.
type browser struct {
	t      *testing.T
	base   string // http://127.0.0.1:port
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var devtoolsURL = regexp.MustCompile(`DevTools listening on (ws://([^/\s]+)/\S+)`)

// startBrowser starts headless Chromium in its own process group, killed
// (with every helper process it forked) at cleanup.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--no-default-browser-check", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-dev-shm-usage", "--disable-background-timer-throttling",
		"--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--window-size=1280,900", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	b := &browser{t: t, stderr: &syncBuffer{}}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(b.stderr, line)
			if m := devtoolsURL.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[2]:
				default:
				}
			}
		}
		_, _ = io.Copy(b.stderr, pipe)
	}()
	select {
	case hostport := <-found:
		b.base = "http://" + hostport
	case <-time.After(60 * time.Second):
		t.Fatalf("chromium did not open its DevTools endpoint:\n%s", b.stderr.String())
	}
	return b
}

// tab is one page target over its own DevTools connection.
type tab struct {
	t  *testing.T
	ws *websocket.Conn

	next    atomic.Int64
	mu      sync.Mutex
	waiting map[int64]chan cdpMsg
	events  []cdpMsg
	readErr error
}

type cdpMsg struct {
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// newTab opens a page target and connects to it.
func (b *browser) newTab(ctx context.Context) *tab {
	t := b.t
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, b.base+"/json/new?about:blank", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("devtools /json/new: %v", err)
	}
	defer resp.Body.Close()
	var target struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&target); err != nil || target.WebSocketDebuggerURL == "" {
		t.Fatalf("devtools /json/new: status %d, %v", resp.StatusCode, err)
	}
	ws, _, err := websocket.Dial(ctx, target.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatalf("devtools dial: %v", err)
	}
	ws.SetReadLimit(256 << 20) // screenshots arrive as one message
	tb := &tab{t: t, ws: ws, waiting: map[int64]chan cdpMsg{}}
	readCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = ws.CloseNow() })
	go tb.read(readCtx)
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		tb.call(ctx, m, nil, nil)
	}
	tb.call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	return tb
}

func (tb *tab) read(ctx context.Context) {
	for {
		_, data, err := tb.ws.Read(ctx)
		if err != nil {
			tb.mu.Lock()
			tb.readErr = err
			for id, ch := range tb.waiting {
				close(ch)
				delete(tb.waiting, id)
			}
			tb.mu.Unlock()
			return
		}
		var m cdpMsg
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		tb.mu.Lock()
		if m.ID != 0 {
			if ch, ok := tb.waiting[m.ID]; ok {
				ch <- m
				delete(tb.waiting, m.ID)
			}
		} else {
			tb.events = append(tb.events, m)
		}
		tb.mu.Unlock()
	}
}

// call sends a DevTools command and decodes its result into out.
func (tb *tab) call(ctx context.Context, method string, params, out any) {
	tb.t.Helper()
	id := tb.next.Add(1)
	ch := make(chan cdpMsg, 1)
	tb.mu.Lock()
	if tb.readErr != nil {
		tb.mu.Unlock()
		tb.t.Fatalf("devtools %s: connection lost: %v", method, tb.readErr)
	}
	tb.waiting[id] = ch
	tb.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		tb.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := tb.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		tb.t.Fatalf("devtools %s: %v", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			tb.t.Fatalf("devtools %s: connection lost", method)
		}
		if m.Error != nil {
			tb.t.Fatalf("devtools %s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if out != nil {
			if err := json.Unmarshal(m.Result, out); err != nil {
				tb.t.Fatalf("devtools %s: decode result: %v", method, err)
			}
		}
	case <-ctx.Done():
		tb.t.Fatalf("devtools %s: no answer: %v", method, ctx.Err())
	}
}

// navigate loads url in the tab.
func (tb *tab) navigate(ctx context.Context, url string) {
	tb.t.Helper()
	var res struct {
		ErrorText string `json:"errorText"`
	}
	tb.call(ctx, "Page.navigate", map[string]any{"url": url}, &res)
	if res.ErrorText != "" {
		tb.t.Fatalf("navigate %s: %s", url, res.ErrorText)
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// decoded into out.
func (tb *tab) eval(ctx context.Context, expr string, out any) {
	tb.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	tb.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		tb.t.Fatalf("eval %s: %s", expr, res.ExceptionDetails.Text)
	}
	if out != nil && len(res.Result.Value) > 0 {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			tb.t.Fatalf("eval %s: decode %s: %v", expr, res.Result.Value, err)
		}
	}
}

// waitTrue polls a boolean expression until it is true or d passes, and
// reports the page's text when it never is.
func (tb *tab) waitTrue(ctx context.Context, d time.Duration, what, expr string) {
	tb.t.Helper()
	deadline := time.Now().Add(d)
	for {
		var ok bool
		// A page still loading may have no body yet: an exception is a no.
		tb.eval(ctx, "(() => { try { return Boolean("+expr+") } catch (e) { return false } })()", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var text string
			tb.eval(ctx, "document.body ? document.body.innerText : ''", &text)
			tb.t.Fatalf("%s: not seen within %s (%s)\npage text:\n%s", what, d, expr, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot brings the tab to the front and captures its viewport as
// PNG.
func (tb *tab) screenshot(ctx context.Context) []byte {
	tb.t.Helper()
	var res struct {
		Data string `json:"data"`
	}
	// A background tab produces no frames, and captureScreenshot waits
	// for one: bring the tab to the front first.
	tb.call(ctx, "Page.bringToFront", nil, nil)
	tb.call(ctx, "Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// problems lists the page's uncaught exceptions and error-level log
// entries (a Content-Security-Policy violation is one) seen so far.
func (tb *tab) problems() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
	for _, ev := range tb.events {
		switch ev.Method {
		case "Runtime.exceptionThrown":
			out = append(out, "exception: "+string(ev.Params))
		case "Log.entryAdded":
			var p struct {
				Entry struct {
					Level, Text, URL string
				} `json:"entry"`
			}
			if json.Unmarshal(ev.Params, &p) == nil && p.Entry.Level == "error" {
				out = append(out, strings.TrimSpace(p.Entry.Text+" "+p.Entry.URL))
			}
		case "Runtime.consoleAPICalled":
			var p struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(ev.Params, &p) == nil && p.Type == "error" {
				out = append(out, "console.error: "+string(ev.Params))
			}
		}
	}
	return out
}

// screenshotFull captures the whole page, below the viewport too, as PNG.
func (tb *tab) screenshotFull(ctx context.Context) []byte {
	tb.t.Helper()
	var m struct {
		CSSContentSize struct {
			Width, Height float64
		} `json:"cssContentSize"`
	}
	tb.call(ctx, "Page.getLayoutMetrics", nil, &m)
	var res struct {
		Data string `json:"data"`
	}
	tb.call(ctx, "Page.bringToFront", nil, nil)
	tb.call(ctx, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": m.CSSContentSize.Width, "height": min(m.CSSContentSize.Height, 4000), "scale": 1}}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// click clicks the element a CSS selector finds (it must be there).
func (tb *tab) click(ctx context.Context, selector string) {
	tb.t.Helper()
	var ok bool
	tb.eval(ctx, `(() => { const el = document.querySelector(`+jsString(selector)+`); if (!el) return false; el.click(); return true })()`, &ok)
	if !ok {
		tb.t.Fatalf("click %s: no such element", selector)
	}
}

// typeInto focuses the field a selector finds and types text into it
// (Input.insertText: as a keyboard would, events and all).
func (tb *tab) typeInto(ctx context.Context, selector, text string) {
	tb.t.Helper()
	var ok bool
	tb.eval(ctx, `(() => { const el = document.querySelector(`+jsString(selector)+`); if (!el) return false; el.focus(); return true })()`, &ok)
	if !ok {
		tb.t.Fatalf("type into %s: no such element", selector)
	}
	tb.call(ctx, "Input.insertText", map[string]any{"text": text}, nil)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
