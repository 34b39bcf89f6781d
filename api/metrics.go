package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics counts the API's requests by route: the route's pattern
// ("/v1/threads/{id}/cancel"), never a thread id, so the series stay few.
type metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_api_requests_total",
			Help: "API requests answered, by route, method and status code."}, []string{"route", "method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "spool_api_request_seconds",
			Help:    "How long the API took to answer, by route and method (an event stream: how long it was followed).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"route", "method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe runs h for a request of route and counts it; m may be nil.
func (m *metrics) observe(route string, w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter)) {
	if m == nil {
		h(w)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	began := time.Now()
	h(sw)
	code := sw.code
	if code == 0 {
		code = http.StatusOK
	}
	m.requests.WithLabelValues(route, r.Method, strconv.Itoa(code)).Inc()
	m.seconds.WithLabelValues(route, r.Method).Observe(time.Since(began).Seconds())
}

// statusWriter remembers the status code written; Unwrap gives
// http.ResponseController (an event stream's Flush) the writer beneath.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
