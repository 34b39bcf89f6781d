package monitor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/spool-run/spool/internal/testing/testenv"
)

// The browser tests drive a real headless Chromium with chromedp. The
// helpers below keep the tests' vocabulary (navigate, wait until, click,
// type, screenshot) and turn every failure into t.Fatal with what the page
// showed.

// actionTimeout bounds one browser action (a navigation, a click, a
// screenshot): generous, for a loaded two-core machine.
const actionTimeout = time.Minute

// findChromium returns the browser binary: $SPOOL_TEST_CHROMIUM, or
// chromium / chromium-browser / google-chrome on PATH. With none, the test
// skips, or fails under SPOOL_TEST_REQUIRE_REAL=1 (CI installs Debian's
// chromium: .ci/run).
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
		t.Fatal("no chromium on PATH, and SPOOL_TEST_REQUIRE_REAL=1: apt-get install chromium (.ci/run does)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium, or set SPOOL_TEST_CHROMIUM)")
	return ""
}

// browser is a headless Chromium, stopped with every process it started at
// the test's cleanup.
type browser struct {
	t   *testing.T
	ctx context.Context // chromedp's browser context
	out *lockedBuffer   // the browser's stdout and stderr
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBrowser starts headless Chromium from bin.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	out := &lockedBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true), chromedp.CombinedOutput(out))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b := &browser{t: t, ctx: ctx, out: out}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chromium's output:\n%s", out.String())
		}
		cancel()
		cancelAlloc() // waits for the browser to exit
	})
	// The first action starts the browser: fail here, with its output, if
	// it cannot.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v\n%s", bin, err, out.String())
	}
	return b
}

// tab is one page of the browser, with the errors it reported.
type tab struct {
	t   *testing.T
	ctx context.Context // chromedp's context of this target

	mu   sync.Mutex
	errs []string
}

// newTab opens a page at a 1280×900 viewport, collecting its uncaught
// exceptions, console errors and error-level log entries (a
// Content-Security-Policy violation is one) for problems.
func (b *browser) newTab() *tab {
	t := b.t
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	tb := &tab{t: t, ctx: ctx}
	messages := chromedp.Console(ctx) // opens the target, subscribed from its start
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				tb.mu.Lock()
				tb.errs = append(tb.errs, strings.TrimSpace(m.String()+" "+m.URL))
				tb.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	tb.do("set the viewport", chromedp.EmulateViewport(1280, 900))
	return tb
}

// do runs actions within actionTimeout and fails the test on an error.
func (tb *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("%s: %v", what, err)
	}
}

// retry runs action until it succeeds or actionTimeout passes: the live
// pages replace their sections while the thread runs, so a node found a
// moment ago may be gone when it is clicked.
func (tb *tab) retry(what string, action chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 10*time.Second)
		err := chromedp.Do(attempt, action)
		cancelAttempt()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			tb.t.Fatalf("%s: %v\npage text:\n%s", what, err, tb.text())
		}
	}
}

// navigate loads url in the tab and waits for its load event.
func (tb *tab) navigate(url string) {
	tb.t.Helper()
	tb.do("navigate to "+url, chromedp.Navigate(url))
}

// eval evaluates a JavaScript expression in the page and decodes its value
// into out.
func (tb *tab) eval(expr string, out any) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		tb.t.Fatalf("eval %s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		tb.t.Fatalf("eval %s: decode %s: %v", expr, raw, err)
	}
}

// text is the page's visible text, for failure messages.
func (tb *tab) text() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// waitTrue waits until a boolean expression holds in the page, polled in
// the page every 100ms, for at most d; a navigation in between (a click on
// a link, a form posted) restarts the poll on the new page. It fails with
// the page's text when the expression never holds.
func (tb *tab) waitTrue(d time.Duration, what, expr string) {
	tb.t.Helper()
	// A page still loading may have no body yet: an exception is a no.
	predicate := "(() => { try { return Boolean(" + expr + ") } catch (e) { return false } })()"
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			tb.t.Fatalf("%s: not seen within %s (%s)\npage text:\n%s", what, d, expr, tb.text())
		}
		ctx, cancel := context.WithTimeout(tb.ctx, left+10*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(left)))
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, chromedp.ErrPollingTimeout):
			tb.t.Fatalf("%s: not seen within %s (%s)\npage text:\n%s", what, d, expr, tb.text())
		case tb.ctx.Err() != nil:
			tb.t.Fatalf("%s: %v", what, err)
		}
		// The page navigated under the poll: poll the new one.
	}
}

// click clicks, with the mouse, the element a CSS selector finds, once it
// is visible.
func (tb *tab) click(selector string) {
	tb.t.Helper()
	tb.retry("click "+selector, chromedp.Click(chromedp.CSS(selector)))
}

// typeInto focuses the field a CSS selector finds and types text into it,
// key by key.
func (tb *tab) typeInto(selector, text string) {
	tb.t.Helper()
	// Focused, a field of a live section is not swapped any more; the keys
	// go to whatever has the focus.
	tb.retry("focus "+selector, chromedp.Focus(chromedp.CSS(selector)))
	tb.do("type into "+selector, chromedp.KeyEvent(text))
}

// screenshot brings the tab to the front (a background tab produces no
// frames to capture) and captures its viewport as PNG.
func (tb *tab) screenshot() []byte {
	tb.t.Helper()
	return tb.capture(chromedp.CaptureScreenshot())
}

// screenshotFull captures the whole page, below the viewport too (at most
// 4000 CSS pixels of it), as PNG.
func (tb *tab) screenshotFull() []byte {
	tb.t.Helper()
	return tb.capture(func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		m, err := cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return nil, err
		}
		size := m.CSSContentSize
		res, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			CaptureBeyondViewport: new(true),
			Clip:                  &page.Viewport{Width: size.Width, Height: min(size.Height, 4000), Scale: 1},
		})
		return res.Data, err
	})
}

func (tb *tab) capture(shot chromedp.Action[[]byte]) []byte {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	if _, err := chromedp.Call(ctx, page.BringToFront, cdp.Empty{}); err != nil {
		tb.t.Fatalf("bring the tab to the front: %v", err)
	}
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// problems lists the errors the page reported so far.
func (tb *tab) problems() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.errs...)
}
