package monitor

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/thread"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageCSP is the Content-Security-Policy of spool's pages: their own
// script, stylesheet and API, nothing else.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	fsrv := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}

// pages are the parsed templates.
type pages struct {
	list, thread, transcript, errPage    *template.Template
	approvals, confirm, decide, timeline *template.Template
	event, ratelimits, graph             *template.Template
	tenants, tenant                      *template.Template
	cost, webhooks                       *template.Template
}

// pathOf escapes each segment of a thread id for a URL path: ids contain
// slashes, which stay separators.
func pathOf(id string) string {
	segs := strings.Split(id, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

var funcs = template.FuncMap{
	"threadURL":     func(id string) string { return "/threads/" + pathOf(id) },
	"transcriptURL": func(id string) string { return "/threads/" + pathOf(id) + "/transcript" },
	"timelineURL":   func(id string) string { return "/threads/" + pathOf(id) + "/timeline" },
	"apiURL":        func(id string) string { return "/api/threads/" + pathOf(id) },
	"eventsURL":     func(id string) string { return "/api/threads/" + pathOf(id) + "/events" },
	"deltasURL":     func(id string) string { return "/api/threads/" + pathOf(id) + "/deltas" },
	"tenantURL":     func(t string) string { return "/tenants/" + url.PathEscape(t) },
	"dayLabel":      dayLabel,
	"hasPrefix":     strings.HasPrefix,
	"usd": func(f float64) string {
		if f >= 1 {
			return fmt.Sprintf("$%.4f", f)
		}
		return fmt.Sprintf("$%.6f", f)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"clock":    func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"ago":      ago,
	"until":    until,
	"pretty":   pretty,
	"terminal": func(s thread.Status) bool { return s.Terminal() },
	"pct": func(part, whole float64) string {
		if whole <= 0 {
			return "0"
		}
		return fmt.Sprintf("%.1f", min(100, max(0, part/whole*100)))
	},
	"sub":            func(a, b float64) float64 { return a - b },
	"dur":            func(sec float64) string { return (time.Duration(sec * float64(time.Second))).String() },
	"durMS":          func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
	"short":          firstLine,
	"seconds":        seconds,
	"offset":         offset,
	"secondsBetween": func(a, b time.Time) float64 { return b.Sub(a).Seconds() },
	"plus":           func(a, b int) int { return a + b },
	"minus":          func(a, b int) int { return a - b },
	"kindName":       kindName,
	"pctOf":          pctOf,
	"count":          count,
	"ordinal":        admission.Ordinal,
	"usdOr":          usdOr,
	"list":           func(s ...string) []string { return s },
}

// count is n with its noun, one or many as n is one or not ("1 step",
// "3 steps"), for any integer n.
func count(n any, one, many string) string {
	s := fmt.Sprint(n)
	if s == "1" || s == "-1" {
		return s + " " + one
	}
	return s + " " + many
}

// usdOr renders a ceiling in dollars (two decimals), or none when unset.
func usdOr(p *float64, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprintf("$%.2f", *p)
}

// pretty renders v as indented JSON, leaving <, > and & as they are: the
// template escapes them for the page.
func pretty(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// ago renders how long ago t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// until renders how long until t, roughly ("now" once it has come).
func until(t time.Time) string {
	d := time.Until(t)
	switch {
	case d <= 0:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("in %ds", int(d.Seconds())+1)
	case d < time.Hour:
		return fmt.Sprintf("in %dm", int(d.Minutes()))
	}
	return fmt.Sprintf("in %dh", int(d.Hours()))
}

func loadPages() (*pages, error) {
	base, err := template.New("base").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("monitor templates: %w", err)
	}
	one := func(name string) (*template.Template, error) {
		t, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if _, err := t.ParseFS(templateFS, "templates/"+name); err != nil {
			return nil, fmt.Errorf("monitor template %s: %w", name, err)
		}
		return t, nil
	}
	p := &pages{}
	for name, dst := range map[string]**template.Template{
		"list.html": &p.list, "thread.html": &p.thread, "transcript.html": &p.transcript, "error.html": &p.errPage,
		"approvals.html": &p.approvals, "confirm.html": &p.confirm, "decide.html": &p.decide, "timeline.html": &p.timeline,
		"ratelimits.html": &p.ratelimits, "graph.html": &p.graph, "tenants.html": &p.tenants, "tenant.html": &p.tenant, "cost.html": &p.cost,
		"webhooks.html": &p.webhooks,
	} {
		if *dst, err = one(name); err != nil {
			return nil, err
		}
	}
	if p.event, err = base.Clone(); err != nil {
		return nil, err
	}
	return p, nil
}

// page is what the layout renders.
type page struct {
	Title string
	Nav   string // "threads" or "approvals" marks the nav entry
	Poll  int64  // live pages' poll interval, ms
	Flash *flash // the outcome of the action that led here
	// Bare: a page for people outside the monitor (a decision link): no
	// navigation.
	Bare bool
	Data any
}

// render executes t into a buffer first, so that a template error is a
// clean 500 rather than half a page.
func (m *Monitor) render(w http.ResponseWriter, r *http.Request, code int, t *template.Template, p page) {
	p.Poll = m.cfg.PollInterval.Milliseconds()
	if p.Flash == nil {
		p.Flash = m.pageFlash(w, r)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		m.cfg.Logger.Error("monitor: render page", "page", p.Title, "error", err)
		http.Error(w, "spool monitor: cannot render the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (m *Monitor) errorPage(w http.ResponseWriter, r *http.Request, code int, msg string) {
	m.render(w, r, code, m.pages.errPage, page{Title: http.StatusText(code), Data: struct {
		Code    int
		Message string
	}{code, msg}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error": "cannot encode the response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
