package config

import (
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// approvalsPath is where a project declares the tool calls that wait for
// a person's decision.
const approvalsPath = ".ai/config/agent/approvals.yaml"

// On-timeout decisions of an approval rule.
const (
	OnTimeoutDeny    = "deny"
	OnTimeoutApprove = "approve"
)

// Approvals is approvals.yaml (CLI.md "People in the loop"):
//
//	approvals:
//	  - tool: rye/file-system/fs_write   # glob over tool ids (RateRule.MatchesModel's: "mcp/*" gates every MCP tool)
//	    timeout: 1h                      # optional; then on_timeout applies
//	    on_timeout: deny                 # deny (default) | approve
//	notify:                              # optional: a webhook per pending call
//	  url: https://hooks.example/spool
//	  secret: ${SPOOL_WEBHOOK_SECRET}    # HMAC-SHA256 key (Standard Webhooks)
//	  links: https://spool.example       # optional: one-time approve/deny links
//
// A directive cannot lower it: the rules are the project's, and apply to
// every thread of every directive (a spawn's bundle is its root's).
type Approvals struct {
	Rules  []ApprovalRule `yaml:"approvals"`
	Notify *Notify        `yaml:"notify"`
}

// ApprovalRule gates the tool calls whose id matches Tool.
type ApprovalRule struct {
	Tool string `yaml:"tool"`
	// Timeout, when set, decides a call no one decided in time, as
	// OnTimeout says.
	Timeout   time.Duration `yaml:"-"`
	RawTime   string        `yaml:"timeout"`
	OnTimeout string        `yaml:"on_timeout"`
}

// Notify is the webhook that is told of each pending call. URL and Secret
// may name environment variables (${SPOOL_WEBHOOK_SECRET}), expanded where
// they are used, so the secret need not be in the project's files.
type Notify struct {
	URL    string `yaml:"url"`
	Secret string `yaml:"secret"`
	// Links, when set, is the address of `spool api` (or the monitor) as
	// the people deciding reach it: each notification then carries
	// one-time approve and deny links under it.
	Links string `yaml:"links"`
}

// Match returns the first rule that gates tool id, or nil. Ids are
// matched with "/" separators whichever spelling the call used.
func (a *Approvals) Match(tool string) *ApprovalRule {
	if a == nil {
		return nil
	}
	id := strings.ReplaceAll(tool, ".", "/")
	if strings.Contains(tool, "/") {
		id = tool
	}
	for i := range a.Rules {
		// `*` crosses `/`, as in a capability's trailing `*` and a model
		// glob: "mcp/*" gates mcp/files/write too. A rule that gated less
		// than it reads would let calls through unreviewed.
		if re, err := compiledGlob(a.Rules[i].Tool); err == nil && re.MatchString(id) {
			return &a.Rules[i]
		}
	}
	return nil
}

// LoadApprovals reads approvals.yaml from the project fsys; a missing file
// gates nothing (nil).
func LoadApprovals(fsys fs.FS) (*Approvals, error) {
	return load(fsys, nil, ParseApprovals, approvalsPath)
}

// ParseApprovals parses approvals.yaml; an unknown key, a bad glob, a bad
// timeout or on_timeout, or a notify URL that is not http(s) is an error
// naming the file and rule.
func ParseApprovals(p string, data []byte) (*Approvals, error) {
	var a Approvals
	if err := decodeStrict(p, data, &a); err != nil {
		return nil, err
	}
	for i := range a.Rules {
		r := &a.Rules[i]
		where := fmt.Sprintf("%s: approvals[%d]", p, i)
		if err := checkGlob(where, "tool", "", r.Tool); err != nil {
			return nil, err
		}
		if r.RawTime != "" {
			d, err := time.ParseDuration(r.RawTime)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%s: timeout %q is not a positive duration (e.g. 30m, 1h)", where, r.RawTime)
			}
			r.Timeout = d
		}
		switch r.OnTimeout {
		case "":
			r.OnTimeout = OnTimeoutDeny
		case OnTimeoutDeny, OnTimeoutApprove:
		default:
			return nil, fmt.Errorf("%s: on_timeout %q is not deny or approve", where, r.OnTimeout)
		}
	}
	if n := a.Notify; n != nil {
		// A ${VAR} reference is expanded where the webhook is sent from.
		if !strings.Contains(n.URL, "${") {
			if err := checkHTTPURL(n.URL); err != nil {
				return nil, fmt.Errorf("%s: notify.%w", p, err)
			}
		}
		if n.Secret == "" {
			return nil, fmt.Errorf("%s: notify.secret is required (the webhook's signing key)", p)
		}
	}
	return &a, nil
}
