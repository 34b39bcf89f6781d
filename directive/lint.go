package directive

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/thread"
)

// Known is what a project holds that capabilities name.
type Known struct {
	// Tools are the tool item ids a thread could call
	// ("rye/file-system/fs_write"): the built-in ones and the project's.
	Tools []string
	// MCPServers are the servers of mcp.yaml; their tools are
	// mcp/<server>/<tool>, whatever tools a server lists when it runs.
	MCPServers []string
	// Directives are the directive names the resolver finds.
	Directives []string
}

// Lint returns a warning for each capability of d that names no tool or
// directive of known: a misspelt tool id in <permissions> would otherwise
// leave the thread without the tool, each call refused. A warning does
// not stop a run (the tool may be meant for another project, or the
// reference system's), so it is no error. Capabilities over knowledge,
// and wildcards that name no item type ("*", "rye.execute.*"), are not
// checked.
func Lint(d *Directive, known Known) []string {
	var out []string
	for _, c := range d.Permissions {
		primary, itemType, id, ok := splitCapability(c)
		if !ok {
			continue
		}
		var what string
		var names []string
		switch itemType {
		case "tool":
			if knownTool(c, primary, known) {
				continue
			}
			what, names = "tool", known.Tools
		case "directive":
			if matchesAny(c, primary, "directive", known.Directives) {
				continue
			}
			what, names = "directive", known.Directives
		default:
			continue
		}
		msg := fmt.Sprintf("<permissions>: %s names no known %s", c, what)
		if strings.HasSuffix(c, "*") {
			msg = fmt.Sprintf("<permissions>: %s matches no known %s", c, what)
		} else if near := nearest(id, names); near != "" {
			msg += " (did you mean " + near + "?)"
		}
		out = append(out, msg)
	}
	return out
}

// splitCapability splits "rye.<primary>.<item type>.<id>" (id may end in
// "*"); !ok when c names no item type.
func splitCapability(c string) (primary, itemType, id string, ok bool) {
	rest, ok := strings.CutPrefix(thread.NormalizeCapability(c), thread.CapabilityPrefix)
	if !ok {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) < 3 || strings.Contains(parts[0], "*") || strings.Contains(parts[1], "*") {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

func knownTool(c, primary string, known Known) bool {
	if matchesAny(c, primary, "tool", known.Tools) {
		return true
	}
	for _, s := range known.MCPServers {
		if thread.MatchUnder([]string{c}, thread.Capability(primary, "tool", "mcp/"+s)+".") {
			return true
		}
	}
	return false
}

// matchesAny reports whether capability c grants primary on any of ids.
func matchesAny(c, primary, itemType string, ids []string) bool {
	for _, id := range ids {
		if thread.Match([]string{c}, thread.Capability(primary, itemType, id)) {
			return true
		}
	}
	return false
}

// nearest is the id of ids that id (written with "." or "/") is a likely
// misspelling of, "" for none.
func nearest(id string, ids []string) string {
	id = thread.NormalizeCapability(id)
	best, bestD := "", -1
	for _, k := range ids {
		d := spelling.Distance(id, thread.NormalizeCapability(k))
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD >= 0 && bestD <= min(3, len(id)/5) {
		return best
	}
	return ""
}

// Suggest is the directive the resolver finds that name is a likely
// misspelling of ("mine/summ" for mine/sum), "" for none.
func (r *Resolver) Suggest(name string) string {
	names, err := r.Names()
	if err != nil {
		return ""
	}
	return nearest(name, names)
}

// Names lists every directive the resolver finds, each once (the first
// space that has it wins), sorted.
func (r *Resolver) Names() ([]string, error) {
	seen := map[string]bool{}
	for _, s := range r.Spaces {
		if s.FS == nil {
			continue
		}
		err := fs.WalkDir(s.FS, ".", func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !de.IsDir() && strings.HasSuffix(p, ".md") {
				seen[strings.TrimSuffix(p, ".md")] = true
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list directives of the %s space: %w", s.Name, err)
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}
