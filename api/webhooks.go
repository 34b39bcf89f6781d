package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/spool-run/spool/orchestrator"
)

// deliveriesPath lists webhook deliveries; a delivery's redelivery is
// deliveriesPath/{id}/redeliver.
const deliveriesPath = "/v1/webhooks/deliveries"

// deliveries answers GET /v1/webhooks/deliveries (spool webhook
// deliveries): newest first, by endpoint and status; a bound token's
// tenant's only.
func (s *server) deliveries(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	limit, status, msg := deliveriesQuery(q.Get("limit"), q.Get("status"))
	if msg != "" {
		badRequest(w, r, "%s", msg)
		return
	}
	ds, err := s.cfg.Orch.WebhookDeliveries(r.Context(), orchestrator.DeliveryFilter{Endpoint: q.Get("endpoint"), Status: status,
		Tenant: boundTenant(r), Limit: limit})
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	out := append([]*orchestrator.WebhookDelivery{}, ds...) // [] when none
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": out})
}

// deliveriesQuery reads the list's limit (default 50) and status, or
// says what is wrong with them.
func deliveriesQuery(rawLimit, status string) (limit int, _, msg string) {
	limit = 50
	if rawLimit != "" {
		n, err := strconv.Atoi(rawLimit)
		if err != nil || n < 1 || n > 1000 {
			return 0, "", fmt.Sprintf("limit %q: want 1 to 1000", rawLimit)
		}
		limit = n
	}
	if status != "" && !slices.Contains(orchestrator.DeliveryStatuses, status) {
		return 0, "", fmt.Sprintf("status %q: want one of %s", status, strings.Join(orchestrator.DeliveryStatuses, ", "))
	}
	return limit, status, ""
}

// redeliver answers POST /v1/webhooks/deliveries/{id}/redeliver: the
// delivery, due again with the same webhook-id and body. Another
// tenant's, to a bound token, is one that does not exist.
func (s *server) redeliver(w http.ResponseWriter, r *http.Request, id string) {
	notFound := func() {
		writeProblem(w, r, problem(http.StatusNotFound, "not_found", "webhook delivery %q not found", id))
	}
	d, err := s.cfg.Orch.WebhookDelivery(r.Context(), id)
	if errors.Is(err, orchestrator.ErrDeliveryNotFound) {
		notFound()
		return
	}
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	if b := boundTenant(r); b != "" && d.Tenant != b {
		notFound()
		return
	}
	d, err = s.cfg.Orch.Redeliver(r.Context(), id)
	if errors.Is(err, orchestrator.ErrDeliveryNotFound) {
		notFound()
		return
	}
	s.reply(w, r, "", d, err)
}

// deliveryRoute answers deliveriesPath/{id}/redeliver: an id of one
// segment, then redeliver, or no route.
func (s *server) deliveryRoute(w http.ResponseWriter, r *http.Request) {
	id, action, ok := strings.Cut(r.PathValue("rest"), "/")
	if !ok || id == "" || action != "redeliver" {
		writeProblem(w, r, problem(http.StatusNotFound, "not_found", "no route %s", r.URL.Path))
		return
	}
	s.dispatch(w, r, id, deliveriesPath+"/{id}/redeliver")
}
