package keyspace

// Run events for webhooks (CLI.md "Operating a fleet") pass through two
// places. The outbox is per shard, beside the records whose status
// changes write to it in the same script; the deliveries live on the
// namespace's own tag, as bulk operations do, so that a delivery's record
// and the due index are written together on a Cluster.

// Outbox is the stream of run events of id's shard not yet turned into
// deliveries (fields: thread, type, at, key).
func (s Space) Outbox(id string) string { return s.tp(id) + "outbox" }

// AllOutbox are every shard's outboxes.
func (s Space) AllOutbox() []string { return s.all("outbox") }

// WebhookDelivery is the record of delivery id (a hash: event id, type,
// endpoint, url, run, body, status, attempts, last answer, ...).
func (s Space) WebhookDelivery(id string) string { return s.prefix + "webhook:" + id }

// WebhookDue is the sorted set of the deliveries to try (score: when the
// next attempt is due, unix ms; a claimed delivery's score is its lease).
func (s Space) WebhookDue() string { return s.prefix + "webhook:due" }

// WebhookRelayed is the hash of how far the relay has read each shard's
// outbox (outbox key → the last entry id relayed). It lives beside the
// deliveries it made, so a failover that loses some of them loses the
// cursor's advance past them too, and they are made again.
func (s Space) WebhookRelayed() string { return s.prefix + "webhook:relayed" }

// WebhookAll is the sorted set of every delivery kept (score: when it was
// made, unix ms), for listing them newest first.
func (s Space) WebhookAll() string { return s.prefix + "webhook:all" }

// WebhookStats is the hash of every endpoint's delivery counters, for
// /metrics: "<endpoint>|made" (deliveries made), "<endpoint>|<outcome>"
// (attempts by outcome: delivered, retrying, failed).
func (s Space) WebhookStats() string { return s.prefix + "webhook:stats" }
