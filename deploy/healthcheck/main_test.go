package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProbe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.WriteHeader(http.StatusOK)
		case "/redirect":
			http.Redirect(w, r, "/healthz", http.StatusFound)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name    string
		url     string
		wantErr bool
	}{
		{"healthy", srv.URL + "/healthz", false},
		{"redirect followed", srv.URL + "/redirect", false},
		{"unhealthy status", srv.URL + "/down", true},
		{"connection refused", closedURL + "/healthz", true},
		{"bad url", "://nope", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := probe(context.Background(), tt.url, 5*time.Second)
			if (err != nil) != tt.wantErr {
				t.Fatalf("probe(%q) error = %v, wantErr %v", tt.url, err, tt.wantErr)
			}
		})
	}
}
