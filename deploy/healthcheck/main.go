// Command healthcheck probes an HTTP URL and exits 0 on a 2xx answer, 1
// otherwise. The distroless spool image has no shell, curl or wget, so
// compose health checks run this instead:
//
//	healthcheck http://127.0.0.1:9090/healthz
//
// It is built into the image at /healthcheck by deploy/Dockerfile.
// Kubernetes does not need it: its probes speak HTTP themselves.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: healthcheck URL")
		os.Exit(2)
	}
	if err := probe(context.Background(), os.Args[1], 3*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

// probe GETs url and returns nil when the answer is 2xx within timeout.
func probe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("bad url %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("get %s: status %d", url, resp.StatusCode)
	}
	return nil
}
