package thread

import "strings"

// Capability strings name what a thread may do:
// "rye.<primary>.<item_type>.<item id with / as .>", e.g. executing tool
// "scraping/gmaps/scrape_gmaps" needs
// "rye.execute.tool.scraping.gmaps.scrape_gmaps". A granted capability that
// ends in "*" matches every capability starting with what comes before the
// "*" ("rye.execute.tool.rye.file-system.*"); "*" alone grants everything.
// Tool ids may be written with "/" or "." on either side: both are
// normalised to ".". A thread with no capabilities may do nothing (fail
// closed).

// Primaries of a capability.
const (
	PrimaryExecute = "execute"
	PrimarySearch  = "search"
	PrimaryLoad    = "load"
	PrimarySign    = "sign"
	// PrimaryFetch is the reference's later primary that merged search
	// and load: "rye.fetch.<type>.<id>" grants searching and loading the
	// item, as if both were written (ExpandFetch). Nothing checks a fetch
	// capability itself.
	PrimaryFetch = "fetch"
)

// ExpandFetch returns the capabilities c grants: for a fetch capability
// ("rye.fetch.knowledge.x.*", "rye.fetch.*", "rye.fetch*") the search and
// the load one of the same items, in that order; any other c alone. c is
// normalised.
func ExpandFetch(c string) []string {
	c = NormalizeCapability(c)
	rest, ok := strings.CutPrefix(c, CapabilityPrefix+PrimaryFetch)
	if !ok || rest != "" && rest[0] != '.' && rest != "*" {
		return []string{c}
	}
	return []string{CapabilityPrefix + PrimarySearch + rest, CapabilityPrefix + PrimaryLoad + rest}
}

// expandAll normalises caps and writes each fetch capability as the search
// and load it grants, dropping empty ones.
func expandAll(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		for _, e := range ExpandFetch(c) {
			if e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// CapabilityPrefix starts every capability string except the bare "*".
const CapabilityPrefix = "rye."

// NormalizeCapability trims spaces and writes "/" as ".".
func NormalizeCapability(c string) string {
	return strings.ReplaceAll(strings.TrimSpace(c), "/", ".")
}

// Capability returns the capability needed to apply primary to the item
// (itemType, itemID), e.g. Capability("load", "knowledge", "a/b") =
// "rye.load.knowledge.a.b".
func Capability(primary, itemType, itemID string) string {
	return CapabilityPrefix + primary + "." + itemType + "." + NormalizeCapability(itemID)
}

// ToolCapability is the capability needed to execute tool itemID.
func ToolCapability(itemID string) string {
	return Capability(PrimaryExecute, "tool", itemID)
}

// Match reports whether any of granted covers required. required is
// normally a concrete capability; if it is itself a wildcard, Match reports
// whether a single grant covers everything the wildcard names. A fetch
// capability, granted or required, stands for its search and its load
// (ExpandFetch): both must be covered.
func Match(granted []string, required string) bool {
	if NormalizeCapability(required) == "" {
		return false
	}
	for _, r := range ExpandFetch(required) {
		if !matchOne(granted, r) {
			return false
		}
	}
	return true
}

// matchOne reports whether one of granted covers required, a normalised
// capability that is no fetch.
func matchOne(granted []string, required string) bool {
	for _, g := range granted {
		for _, e := range ExpandFetch(g) {
			if covers(e, required) {
				return true
			}
		}
	}
	return false
}

// MatchUnder reports whether granted covers at least one capability that
// starts with prefix: whether a thread may do anything under it (a worker
// asks before connecting to an MCP server whose tools a thread could
// not call anyway). "rye.execute.tool.mcp.files." is under "*",
// "rye.execute.*", "rye.execute.tool.mcp.f*" and
// "rye.execute.tool.mcp.files.read", not under "rye.execute.tool.mcp.other.*".
func MatchUnder(granted []string, prefix string) bool {
	prefix = NormalizeCapability(prefix)
	for _, g := range expandAll(granted) {
		gp, wild := strings.CutSuffix(g, "*")
		if strings.HasPrefix(g, prefix) || wild && (strings.HasPrefix(prefix, gp) || strings.HasPrefix(gp, prefix)) {
			return true
		}
	}
	return false
}

// covers reports whether every capability matched by pattern b is matched
// by pattern a. Both are normalised.
func covers(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ap, aWild := strings.CutSuffix(a, "*")
	bp, bWild := strings.CutSuffix(b, "*")
	switch {
	case !aWild:
		return !bWild && a == b
	default: // a is a wildcard: b's prefix (or b itself) must start with a's prefix
		return strings.HasPrefix(bp, ap)
	}
}

// Intersect returns a child's effective capabilities: each capability the
// child asks for survives if some capability the parent holds covers it;
// a child wildcard broader than what the parent holds is narrowed to the
// parent's grants under it. For every concrete capability r,
// Match(Intersect(asked, parentHeld), r) == Match(asked, r) && Match(parentHeld, r):
// a child never gains a capability its parent lacks. The result is
// normalised, fetch capabilities written as their search and load
// (ExpandFetch), in the order first seen, without duplicates; it is never
// nil.
func Intersect(asked, parentHeld []string) []string {
	out := []string{}
	seen := map[string]bool{}
	add := func(c string) {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	parent := expandAll(parentHeld)
	for _, a := range expandAll(asked) {
		kept := false
		for _, p := range parent {
			if covers(p, a) {
				add(a)
				kept = true
				break
			}
		}
		if kept {
			continue
		}
		for _, p := range parent {
			if covers(a, p) {
				add(p)
			}
		}
	}
	return out
}
