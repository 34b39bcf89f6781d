package hooks

import (
	"fmt"
	"sort"
)

// Layers, in the order they run.
const (
	LayerUser      = 0
	LayerDirective = 1
	LayerBuiltin   = 2
	LayerProject   = 3
	LayerInfra     = 4
)

// Action primaries. Load, Execute and Search are item actions run through
// the ActionRunner; Retry, Fail and Continue are control actions (see the
// package doc).
const (
	PrimaryLoad     = "load"
	PrimaryExecute  = "execute"
	PrimarySearch   = "search"
	PrimaryRetry    = "retry"
	PrimaryFail     = "fail"
	PrimaryContinue = "continue"
)

// Hook is one hook from any layer.
type Hook struct {
	ID          string
	Event       string
	Condition   *Condition // nil: always
	Action      Action
	Description string
	Layer       int
	// order is the definition position within its layer, set by Merge.
	order int
}

// Action is what a hook does when it fires.
type Action struct {
	Primary  string
	ItemType string
	ItemID   string
	Params   map[string]any
}

// IsControl reports whether the action is a control verb.
func (a Action) IsControl() bool {
	switch a.Primary {
	case PrimaryRetry, PrimaryFail, PrimaryContinue:
		return true
	}
	return false
}

// Validate checks the hook's fields and condition; the error names the hook.
func (h Hook) Validate() error {
	name := fmt.Sprintf("%q", h.ID)
	switch {
	case h.Event == "":
		return fmt.Errorf("hook %s: missing event", name)
	case !KnownEvent(h.Event):
		return fmt.Errorf("hook %s: unknown event %q", name, h.Event)
	}
	switch h.Action.Primary {
	case PrimaryLoad, PrimaryExecute, PrimarySearch:
		if h.Action.ItemType == "" {
			return fmt.Errorf("hook %s: action %s: missing item_type", name, h.Action.Primary)
		}
		if h.Action.ItemID == "" && h.Action.Primary != PrimarySearch {
			return fmt.Errorf("hook %s: action %s: missing item_id", name, h.Action.Primary)
		}
	case PrimaryRetry, PrimaryFail, PrimaryContinue:
	case "":
		return fmt.Errorf("hook %s: action: missing primary", name)
	default:
		return fmt.Errorf("hook %s: action: unknown primary %q", name, h.Action.Primary)
	}
	if h.Condition != nil {
		if err := h.Condition.Validate(); err != nil {
			return fmt.Errorf("hook %s: condition: %w", name, err)
		}
	}
	return nil
}

// Merge concatenates the layers, stamping each hook with its layer, and
// returns them sorted by layer then definition order.
func Merge(user, directive, builtin, project, infra []Hook) []Hook {
	var out []Hook
	for layer, hs := range [][]Hook{user, directive, builtin, project, infra} {
		for i, h := range hs {
			h.Layer = layer
			h.order = i
			out = append(out, h)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Layer != out[j].Layer {
			return out[i].Layer < out[j].Layer
		}
		return out[i].order < out[j].order
	})
	return out
}
