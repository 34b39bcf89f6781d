package worker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spool-run/spool/orchestrator"
)

// Webhooks on run events (package orchestrator's webhooks): every worker
// attempts due deliveries, at most Config.WebhookConcurrency at once,
// beside its activations and never in their slots; the one that holds
// the relay also turns the outboxes' events into deliveries.

// webhookRelayLease is how long a worker holds the relay between
// renewals (it renews every poll).
const webhookRelayLease = 10 * time.Second

// webhookLoop relays and delivers until ctx ends.
func (w *Worker) webhookLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.WebhookPoll)
	defer t.Stop()
	sem := make(chan struct{}, w.cfg.WebhookConcurrency)
	client := &http.Client{Timeout: w.cfg.WebhookTimeout}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.relayWebhooks(ctx)
		free := cap(sem) - len(sem)
		if free == 0 {
			continue
		}
		// A claimed attempt holds its delivery for its timeout and a
		// margin; a worker that dies mid-attempt leaves it due after.
		ds, err := w.o.ClaimWebhooks(ctx, free, w.cfg.WebhookTimeout+5*time.Second)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("webhooks: claim", "error", err)
		}
		for _, d := range ds {
			sem <- struct{}{}
			w.bg.Add(1)
			go func() {
				defer w.bg.Done()
				defer func() { <-sem }()
				w.attemptWebhook(ctx, client, d)
			}()
		}
	}
}

// relayWebhooks relays the outboxes when this worker holds the relay.
func (w *Worker) relayWebhooks(ctx context.Context) {
	held, err := w.o.HoldWebhookRelay(ctx, w.token, webhookRelayLease)
	if err != nil || !held {
		if err != nil && ctx.Err() == nil {
			w.log.Warn("webhooks: relay", "error", err)
		}
		return
	}
	if n, err := w.o.RelayWebhooks(ctx, 256); err != nil && ctx.Err() == nil {
		w.log.Warn("webhooks: relay", "relayed", n, "error", err)
	}
}

// attemptWebhook makes one attempt of d and records its outcome.
func (w *Worker) attemptWebhook(ctx context.Context, c *http.Client, d *orchestrator.WebhookDelivery) {
	code, err := postWebhook(ctx, c, d, os.Getenv(d.SecretEnv), time.Now())
	if ctx.Err() != nil {
		return // stopping: the lease lapses and another attempt comes
	}
	if err != nil {
		w.log.Info("webhook attempt failed", "delivery", d.ID, "endpoint", d.Endpoint, "attempt", d.Attempts, "error", err)
	}
	if rerr := w.o.WebhookAttempted(context.WithoutCancel(ctx), d, code, err, w.cfg.WebhookBackoff); rerr != nil {
		w.log.Warn("webhooks: record attempt", "delivery", d.ID, "error", rerr)
	}
}

// postWebhook POSTs d's body to its URL with the Standard Webhooks headers
// (webhook-id: the event's id, the same on every attempt), signed with
// secret unless it is "" (an endpoint without secret_env, or a worker
// whose environment lacks it: then the attempt fails, naming the
// variable). It returns the answer's status (0: none) and an error for a
// failure or a non-2xx answer.
func postWebhook(ctx context.Context, c *http.Client, d *orchestrator.WebhookDelivery, secret string, now time.Time) (int, error) {
	if secret == "" && d.SecretEnv != "" && d.SecretEnv != orchestrator.NotifySecretEnv {
		return 0, fmt.Errorf("the signing secret %s is not set in this worker's environment", d.SecretEnv)
	}
	req, err := signedRequest(ctx, d.URL, d.EventID, secret, d.Body, now)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
