package config

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Webhook event types (CLI.md "Operating a fleet"): a run's end, and a run
// of the tree waiting for a person's decision.
const (
	EventRunCompleted       = "run.completed"
	EventRunError           = "run.error"
	EventRunCancelled       = "run.cancelled"
	EventRunWaitingApproval = "run.waiting_approval"
	EventBudgetThreshold    = "budget.threshold"
)

// WebhookEvents are the event types an endpoint may subscribe to.
var WebhookEvents = []string{EventRunCompleted, EventRunError, EventRunCancelled, EventRunWaitingApproval, EventBudgetThreshold}

const webhooksPath = ".ai/config/webhooks.yaml"

// Webhooks is webhooks.yaml: the endpoints told of run events.
//
//	endpoints:
//	  ops:
//	    url: https://hooks.example/spool
//	    secret_env: SPOOL_WEBHOOK_SECRET   # Standard Webhooks signing secret
//	    events: [run.completed, run.error] # default: every run.* event
type Webhooks struct {
	Endpoints map[string]WebhookEndpoint `yaml:"endpoints"`
}

// WebhookEndpoint is one receiver of run events.
type WebhookEndpoint struct {
	Name string `yaml:"-"`
	URL  string `yaml:"url"`
	// SecretEnv names the environment variable, read by the process that
	// delivers (a worker), holding the Standard Webhooks signing secret
	// (a "whsec_" secret is base64 after the prefix). "": unsigned.
	SecretEnv string `yaml:"secret_env"`
	// Events are the event types sent to it; empty: every run.* type.
	Events []string `yaml:"events"`
}

// Subscribed are the event types e gets: its events, else every run.*
// type.
func (e WebhookEndpoint) Subscribed() []string {
	if len(e.Events) > 0 {
		return e.Events
	}
	var out []string
	for _, ev := range WebhookEvents {
		if strings.HasPrefix(ev, "run.") {
			out = append(out, ev)
		}
	}
	return out
}

// Wants reports whether e subscribes to event type typ.
func (e WebhookEndpoint) Wants(typ string) bool { return slices.Contains(e.Subscribed(), typ) }

// Sorted is every endpoint in name order.
func (w *Webhooks) Sorted() []WebhookEndpoint {
	if w == nil {
		return nil
	}
	out := make([]WebhookEndpoint, 0, len(w.Endpoints))
	for _, e := range w.Endpoints {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// For is the endpoints that subscribe to event type typ, in name order.
func (w *Webhooks) For(typ string) []WebhookEndpoint {
	var out []WebhookEndpoint
	for _, e := range w.Sorted() {
		if e.Wants(typ) {
			out = append(out, e)
		}
	}
	return out
}

// LoadWebhooks reads webhooks.yaml from the project fsys; a missing file
// has no endpoints (nil).
func LoadWebhooks(fsys fs.FS) (*Webhooks, error) {
	return load(fsys, nil, ParseWebhooks, webhooksPath, ".ai/config/agent/webhooks.yaml")
}

// NotifyEndpoint is the endpoint name of a run's one-off --notify URL
// (never a name in webhooks.yaml: names are identifiers).
const NotifyEndpoint = "--notify"

var (
	endpointName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// CheckWebhookURL checks a --notify URL: http(s) with a host.
func CheckWebhookURL(raw string) error { return checkHTTPURL(raw) }

// ParseWebhooks parses webhooks.yaml; an unknown key, a bad name, URL,
// environment variable name or event type is an error naming the file and
// endpoint.
func ParseWebhooks(p string, data []byte) (*Webhooks, error) {
	var w Webhooks
	if err := decodeStrict(p, data, &w); err != nil {
		return nil, err
	}
	for name, e := range w.Endpoints {
		where := fmt.Sprintf("%s: endpoints.%s", p, name)
		if !endpointName.MatchString(name) {
			return nil, fmt.Errorf("%s: an endpoint name is letters, digits, '_', '.' and '-' (at most 64)", where)
		}
		if err := checkHTTPURL(e.URL); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if e.SecretEnv != "" && !envName.MatchString(e.SecretEnv) {
			return nil, fmt.Errorf("%s: secret_env %q is not an environment variable name", where, e.SecretEnv)
		}
		for _, ev := range e.Events {
			if !slices.Contains(WebhookEvents, ev) {
				return nil, fmt.Errorf("%s: unknown event %q (one of %s)", where, ev, strings.Join(WebhookEvents, ", "))
			}
		}
		e.Name = name
		w.Endpoints[name] = e
	}
	return &w, nil
}
