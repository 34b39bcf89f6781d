package worker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
)

// ApprovalWebhook is the JSON body of the approval webhook: one POST per
// tool call that waits for a decision.
type ApprovalWebhook struct {
	Type string `json:"type"` // "approval.requested"
	orchestrator.PendingCall
	// ApproveURL and DenyURL are one-time links (notify.links set).
	ApproveURL string `json:"approve_url,omitempty"`
	DenyURL    string `json:"deny_url,omitempty"`
}

// webhookAttempts and webhookBackoff bound the deliveries of one
// notification: 1s, 2s, 4s, ... between attempts.
const (
	webhookAttempts = 6
	webhookBackoff  = time.Second
	// linkLifetime is how long a decision link without a rule timeout
	// stays valid.
	linkLifetime = 7 * 24 * time.Hour
)

// notifyApproval POSTs the pending call pa of thread rec to the approval
// webhook of n (approvals.yaml's notify), beside the turn loop, among the
// worker's background work, signed as Standard Webhooks sign (webhook-id,
// webhook-timestamp, webhook-signature: v1,base64(HMAC-SHA256(secret,
// id.timestamp.body)); a "whsec_" secret is base64 after the prefix), and
// retried with backoff. Best effort: a webhook that stays down delays no
// thread (the call waits for its decision either way).
func (w *Worker) notifyApproval(log *slog.Logger, n config.Notify, rec *registry.Record, pa registry.PendingApproval) {
	if n.URL == "" {
		return
	}
	msg := ApprovalWebhook{Type: "approval.requested", PendingCall: orchestrator.PendingCallOf(rec.ThreadID, rec.Directive, pa)}
	if n.Links != "" {
		exp := pa.Deadline
		if exp.IsZero() {
			exp = pa.RequestedAt.Add(linkLifetime)
		}
		msg.ApproveURL, msg.DenyURL = orchestrator.DecisionLinks(n.Links, rec.ThreadID, pa, n.Secret, exp)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return
	}
	w.goAsync(log, "approval webhook", func(ctx context.Context) error {
		return deliverWebhook(ctx, http.DefaultClient, n.URL, n.Secret, body, time.Now)
	})
}

// deliverWebhook POSTs body to url, signed with secret, trying again with
// backoff (backoff.Retry: webhookAttempts in all, waits doubling from
// webhookBackoff, no jitter) on a failure or a non-2xx answer.
func deliverWebhook(ctx context.Context, c *http.Client, url, secret string, body []byte, now func() time.Time) error {
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	msgID := "msg_" + hex.EncodeToString(id)
	var reqErr error // the request cannot be made (the URL): no attempt mends it
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		req, err := signedRequest(ctx, url, msgID, secret, body, now())
		if err != nil {
			reqErr = err
			return struct{}{}, backoff.Permanent(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			return struct{}{}, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return struct{}{}, fmt.Errorf("webhook answered %s", resp.Status)
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: webhookBackoff, Multiplier: 2, MaxInterval: webhookBackoff << webhookAttempts}),
		backoff.WithMaxTries(webhookAttempts), backoff.WithMaxElapsedTime(0))
	switch {
	case err == nil:
		return nil
	case reqErr != nil:
		return reqErr
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("approval webhook %s: %d attempts: %w", url, webhookAttempts, err)
}

// signedRequest is a POST of body to url with the Standard Webhooks
// headers: webhook-id msgID, webhook-timestamp now, and, unless secret is
// "", webhook-signature.
func signedRequest(ctx context.Context, url, msgID, secret string, body []byte, now time.Time) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "spool-webhooks")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", ts)
	if secret != "" {
		req.Header.Set("webhook-signature", "v1,"+WebhookSignature(secret, msgID, ts, body))
	}
	return req, nil
}

// WebhookSignature is the Standard Webhooks signature of a message:
// base64(HMAC-SHA256(key, id "." timestamp "." body)), the key being the
// base64 after "whsec_" when the secret has that prefix, else the secret.
func WebhookSignature(secret, msgID, timestamp string, body []byte) string {
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil {
			key = k
		}
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID + "." + timestamp + "."))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}
