package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ActionRunner performs item actions for hooks; the worker implements it
// with the thread's permissions and tools.
type ActionRunner interface {
	// Load returns the content of a knowledge or directive item, to be
	// injected into the conversation as context.
	Load(ctx context.Context, itemType, itemID string) (string, error)
	// Execute runs a tool or directive and returns its result text.
	Execute(ctx context.Context, itemType, itemID string, params map[string]any) (string, error)
	// Search searches items of itemType and returns the result text.
	Search(ctx context.Context, itemType, query string) (string, error)
}

// Outcome is what one fired hook did.
type Outcome struct {
	HookID   string
	Layer    int
	Primary  string
	ItemType string
	ItemID   string // after interpolation
	// Result is the runner's output.
	Result string
	// Context is the text to inject into the conversation: the Result of
	// a load, and of an execute on a knowledge item (the spec's examples
	// inject knowledge with primary execute).
	Context string
	Err     error
}

// Dispatcher runs merged hooks. It is safe for concurrent use.
type Dispatcher struct {
	hooks []Hook
}

// NewDispatcher returns a dispatcher over hooks, which must already be in
// run order (see Merge).
func NewDispatcher(hooks []Hook) *Dispatcher {
	return &Dispatcher{hooks: append([]Hook(nil), hooks...)}
}

// Hooks returns the dispatcher's hooks in run order.
func (d *Dispatcher) Hooks() []Hook { return append([]Hook(nil), d.hooks...) }

// Matching returns the hooks for event whose condition holds on evctx, in
// run order. A condition that cannot be evaluated is reported in err and
// its hook skipped.
func Matching(hooks []Hook, event string, evctx map[string]any) ([]Hook, error) {
	var out []Hook
	var errs []error
	for _, h := range hooks {
		if h.Event != event {
			continue
		}
		ok, err := h.Condition.Eval(evctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("hook %s: %w", h.ID, err))
			continue
		}
		if ok {
			out = append(out, h)
		}
	}
	return out, errors.Join(errs...)
}

// Run fires the item actions (load, execute, search) of the hooks matching
// event, in run order; control actions are left to Decide. Item ids,
// search queries and string params are interpolated from evctx (${...}).
// Every matching hook runs even when an earlier one fails: failures are in
// the outcomes and joined into err. Run stops early only when ctx ends.
func (d *Dispatcher) Run(ctx context.Context, event string, evctx map[string]any, runner ActionRunner) ([]Outcome, error) {
	hooks, err := Matching(d.hooks, event, evctx)
	errs := []error{err}
	var outs []Outcome
	for _, h := range hooks {
		if h.Action.IsControl() {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		a := h.Action
		o := Outcome{HookID: h.ID, Layer: h.Layer, Primary: a.Primary, ItemType: a.ItemType, ItemID: Interpolate(a.ItemID, evctx)}
		switch a.Primary {
		case PrimaryLoad:
			o.Result, o.Err = runner.Load(ctx, a.ItemType, o.ItemID)
			o.Context = o.Result
		case PrimaryExecute:
			if a.ItemType == "knowledge" {
				o.Result, o.Err = runner.Load(ctx, a.ItemType, o.ItemID)
				o.Context = o.Result
				break
			}
			params, _ := InterpolateValue(a.Params, evctx).(map[string]any)
			o.Result, o.Err = runner.Execute(ctx, a.ItemType, o.ItemID, params)
		case PrimarySearch:
			query := o.ItemID
			if q, ok := a.Params["query"]; ok {
				query = Format(InterpolateValue(q, evctx))
			}
			o.Result, o.Err = runner.Search(ctx, a.ItemType, query)
		default:
			o.Err = fmt.Errorf("unknown primary %q", a.Primary)
		}
		if o.Err != nil {
			o.Context = ""
			errs = append(errs, fmt.Errorf("hook %s (%s %s %s): %w", h.ID, a.Primary, a.ItemType, o.ItemID, o.Err))
		}
		outs = append(outs, o)
	}
	return outs, errors.Join(errs...)
}

// InjectedContext concatenates the Context of outcomes, in order,
// separated by blank lines.
func InjectedContext(outs []Outcome) string {
	var parts []string
	for _, o := range outs {
		if s := strings.TrimSpace(o.Context); s != "" {
			parts = append(parts, o.Context)
		}
	}
	return strings.Join(parts, "\n\n")
}
