package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/luabatch"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/thread"
)

// StatusActive is the status of an entry that has not released.
const StatusActive = "active"

// entryFields is the HMGET order every script returns.
var entryFields = []string{"parent_id", "max", "reserved", "actual", "own", "overrun", "status"}

// Entry is one thread's ledger entry, in USD.
type Entry struct {
	ThreadID  string  `json:"thread_id"`
	ParentID  string  `json:"parent_id,omitempty"`
	Max       float64 `json:"max"`
	Reserved  float64 `json:"reserved"`  // held for descendants not yet released
	Actual    float64 `json:"actual"`    // own spend + released descendants' spend
	Own       float64 `json:"own"`       // this thread's accepted charges
	Overrun   float64 `json:"overrun"`   // this thread's charges that did not fit
	Remaining float64 `json:"remaining"` // Max − Reserved − Actual
	Status    string  `json:"status"`    // "active" until released
	// The same amounts in nano-USD, exact.
	MaxNano, ReservedNano, ActualNano, OwnNano, OverrunNano int64 `json:"-"`
}

// Ledger is the budget ledger over one Redis keyspace. It is safe for
// concurrent use.
type Ledger struct {
	rdb redis.UniversalClient
	ks  keyspace.Space
}

// New returns a ledger on rdb whose keys are built by ks.
func New(rdb redis.UniversalClient, ks keyspace.Space) *Ledger {
	return &Ledger{rdb: rdb, ks: ks}
}

// Register creates the root entry of a tree with budget max (USD). It is
// idempotent: registering the same root with the same max again is a no-op;
// another max, or an id that is a child, is ErrExists.
func (l *Ledger) Register(ctx context.Context, root string, max float64) error {
	op, err := l.RegisterOp(root, max)
	if err != nil {
		return err
	}
	return op.Run(ctx, l.rdb, "register budget for "+root)
}

// RegisterOp is Register as a step of a batch (luabatch): the batch goes
// on once the root is registered.
func (l *Ledger) RegisterOp(root string, max float64) (luabatch.Op, error) {
	n, err := ToNano(max)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("register budget for %s: %w", root, err)
	}
	if root == "" {
		return luabatch.Op{}, errors.New("register budget: empty thread id")
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: registerScript, Keys: []string{l.ks.Ledger(root)}, Args: []any{n}, Proceed: []string{"OK"}},
		Read: func(reply any) error { return registerReply(root, max, slice(reply)) },
	}, nil
}

func registerReply(root string, max float64, res []any) error {
	if code(res) == "EXISTS" {
		return fmt.Errorf("register budget for %s with max %g: %w", root, max, ErrExists)
	}
	return nil
}

// Reserve gives child a budget of amount (USD) out of parent's remaining
// (max − reserved − actual), atomically. The parent must exist and be
// active. When amount does not fit, nothing changes and the error matches
// both ErrInsufficientBudget and a spend_exceeded *thread.LimitError.
// Reserving again for an existing child of the same parent is a no-op.
func (l *Ledger) Reserve(ctx context.Context, child, parent string, amount float64) error {
	op, err := l.ReserveOp(child, parent, amount)
	if err != nil {
		return err
	}
	return op.Run(ctx, l.rdb, "reserve budget for "+child)
}

// ReserveOp is Reserve as a step of a batch (luabatch): the batch goes on
// once the child's budget is reserved.
func (l *Ledger) ReserveOp(child, parent string, amount float64) (luabatch.Op, error) {
	n, err := ToNano(amount)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("reserve budget for %s: %w", child, err)
	}
	if child == "" || parent == "" || child == parent {
		return luabatch.Op{}, fmt.Errorf("reserve budget: bad ids child %q parent %q", child, parent)
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: reserveScript, Keys: []string{l.ks.Ledger(parent), l.ks.Ledger(child)}, Args: []any{n, parent}, Proceed: []string{"OK"}},
		Read: func(reply any) error { return reserveReply(child, parent, amount, slice(reply)) },
	}, nil
}

func reserveReply(child, parent string, amount float64, res []any) error {
	switch code(res) {
	case "OK":
		return nil
	case "EXISTS":
		return fmt.Errorf("reserve budget for %s from %s: %w (parent %s)", child, parent, ErrExists, str(res, 1))
	case "NOPARENT":
		return fmt.Errorf("reserve budget for %s: parent %s: %w", child, parent, ErrNotFound)
	case "RELEASED":
		return fmt.Errorf("reserve budget for %s: parent %s is %s: %w", child, parent, str(res, 1), ErrReleased)
	case "INSUFFICIENT":
		rem, _ := res[1].(int64)
		le := &thread.LimitError{Code: thread.CodeSpendExceeded, Current: amount, Max: FromNano(rem),
			Message: fmt.Sprintf("reserve %g USD for %s: parent %s has %g USD left", amount, child, parent, FromNano(rem))}
		return fmt.Errorf("reserve budget for %s: %w: %w", child, ErrInsufficientBudget, le)
	}
	return unexpected(res)
}

// Charge adds amount (USD) to id's spend, once per key: a retry with the
// same key changes nothing and reports the first outcome. A charge that
// does not fit in max − reserved − actual is clamped (the part that fits is
// spent, the rest goes to Overrun) and returns a spend_exceeded
// *thread.LimitError with the entry: the thread must stop.
func (l *Ledger) Charge(ctx context.Context, id, key string, amount float64) (Entry, error) {
	var e Entry
	op, err := l.ChargeOp(id, key, amount, func(got Entry, _ error) { e = got })
	if err != nil {
		return Entry{}, err
	}
	err = op.Run(ctx, l.rdb, "charge "+id)
	return e, err
}

// ReportActual reports id's total own spend so far (USD), as the spec's
// report_actual. It is absolute and monotonic: only the part above what was
// already charged (own + overrun) is applied, with Charge's clamping; a
// lower or repeated report changes nothing.
func (l *Ledger) ReportActual(ctx context.Context, id string, actual float64) (Entry, error) {
	n, err := ToNano(actual)
	if err != nil {
		return Entry{}, fmt.Errorf("report actual for %s: %w", id, err)
	}
	return l.charge(ctx, id, "", n, "abs")
}

func (l *Ledger) charge(ctx context.Context, id, key string, n int64, mode string) (Entry, error) {
	var e Entry
	err := l.chargeOp(id, key, n, mode, func(got Entry, _ error) { e = got }).Run(ctx, l.rdb, "charge "+id)
	return e, err
}

// ChargeOp is Charge as a step of a batch (luabatch). The batch goes on
// after a charge that was applied, clamped or not: read, the reply gives
// Charge's entry and error (a spend_exceeded *thread.LimitError when
// clamped) to done, when not nil.
func (l *Ledger) ChargeOp(id, key string, amount float64, done func(Entry, error)) (luabatch.Op, error) {
	n, err := ToNano(amount)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("charge %s: %w", id, err)
	}
	if key == "" {
		return luabatch.Op{}, fmt.Errorf("charge %s: empty idempotency key", id)
	}
	return l.chargeOp(id, key, n, "add", done), nil
}

// chargeOp is chargeScript's step for id: key, n (nano-USD), mode "add" or
// "abs"; done as ChargeOp's.
func (l *Ledger) chargeOp(id, key string, n int64, mode string, done func(Entry, error)) luabatch.Op {
	return luabatch.Op{
		Step: luabatch.Step{Script: chargeScript, Keys: []string{l.ks.Ledger(id)}, Args: []any{key, n, mode}, Proceed: []string{"ok", "over"}},
		Read: func(reply any) error {
			e, err := chargeReply(id, slice(reply))
			if done != nil {
				done(e, err)
			}
			return err
		},
	}
}

func chargeReply(id string, res []any) (Entry, error) {
	switch code(res) {
	case "ok":
		return parseEntry(id, res[1:])
	case "over":
		e, err := parseEntry(id, res[1:])
		if err != nil {
			return e, err
		}
		return e, fmt.Errorf("charge %s: %w", id, &thread.LimitError{Code: thread.CodeSpendExceeded,
			Current: e.Own + e.Overrun, Max: e.Max,
			Message: fmt.Sprintf("thread %s spent %g USD over its budget of %g USD", id, e.Overrun, e.Max)})
	case "NOTFOUND":
		return Entry{}, fmt.Errorf("charge %s: %w", id, ErrNotFound)
	case "RELEASED":
		return Entry{}, fmt.Errorf("charge %s: entry is %s: %w", id, str(res, 1), ErrReleased)
	}
	return Entry{}, unexpected(res)
}

// Release marks id's entry final with status (completed, error, cancelled,
// continued, ...) and cascades it: the parent gets back the unused
// reservation and takes the entry's spend and its still-outstanding grants
// (see the package doc); through already-released ancestors the same delta
// continues up to the first active one. ancestors lists id's ancestors
// parent first, up to the root (registry Record.Ancestors reversed); it must
// reach at least the first active ancestor. Releasing twice is a no-op.
func (l *Ledger) Release(ctx context.Context, id string, ancestors []string, status string) error {
	op, err := l.ReleaseOp(id, ancestors, status)
	if err != nil {
		return err
	}
	return op.Run(ctx, l.rdb, "release "+id)
}

// ReleaseOp is Release as a step of a batch (luabatch): the batch goes on
// once the entry is released (now or before).
func (l *Ledger) ReleaseOp(id string, ancestors []string, status string) (luabatch.Op, error) {
	if status == "" || status == StatusActive {
		return luabatch.Op{}, fmt.Errorf("release %s: final status %q is not a final status", id, status)
	}
	keys := make([]string, 0, len(ancestors)+1)
	args := make([]any, 0, len(ancestors)+1)
	keys = append(keys, l.ks.Ledger(id))
	args = append(args, status)
	for _, a := range ancestors {
		keys = append(keys, l.ks.Ledger(a))
		args = append(args, a)
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: releaseScript, Keys: keys, Args: args, Proceed: []string{"OK", "ALREADY"}},
		Read: func(reply any) error { return releaseReply(id, slice(reply)) },
	}, nil
}

func releaseReply(id string, res []any) error {
	switch code(res) {
	case "OK", "ALREADY":
		return nil
	case "NOTFOUND":
		return fmt.Errorf("release %s: %w", id, ErrNotFound)
	case "ANCESTORS":
		return fmt.Errorf("release %s: %s", id, str(res, 1))
	}
	return unexpected(res)
}

// Get returns id's entry, or ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id string) (Entry, error) {
	vals, err := l.rdb.HMGet(ctx, l.ks.Ledger(id), entryFields...).Result()
	if err != nil {
		return Entry{}, fmt.Errorf("get budget of %s: %w", id, err)
	}
	if vals[1] == nil {
		return Entry{}, fmt.Errorf("get budget of %s: %w", id, ErrNotFound)
	}
	return parseEntry(id, vals)
}

func parseEntry(id string, vals []any) (Entry, error) {
	if len(vals) != len(entryFields) {
		return Entry{}, fmt.Errorf("ledger entry %s: %d fields, want %d", id, len(vals), len(entryFields))
	}
	e := Entry{ThreadID: id}
	s := func(i int) string { v, _ := vals[i].(string); return v }
	e.ParentID, e.Status = s(0), s(6)
	ints := []*int64{&e.MaxNano, &e.ReservedNano, &e.ActualNano, &e.OwnNano, &e.OverrunNano}
	for i, p := range ints {
		switch v := vals[i+1].(type) {
		case int64: // script replies
			*p = v
		case string: // HMGET
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Entry{}, fmt.Errorf("ledger entry %s: field %s: %w", id, entryFields[i+1], err)
			}
			*p = n
		}
	}
	e.Max, e.Reserved, e.Actual = FromNano(e.MaxNano), FromNano(e.ReservedNano), FromNano(e.ActualNano)
	e.Own, e.Overrun = FromNano(e.OwnNano), FromNano(e.OverrunNano)
	e.Remaining = FromNano(e.MaxNano - e.ReservedNano - e.ActualNano)
	return e, nil
}

func code(res []any) string {
	if len(res) == 0 {
		return ""
	}
	s, _ := res[0].(string)
	return s
}

func str(res []any, i int) string {
	if i >= len(res) {
		return ""
	}
	switch v := res[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// slice is a batch step's reply as the []any a script's own Run gives.
func slice(reply any) []any {
	res, _ := reply.([]any)
	return res
}

func unexpected(res []any) error {
	return fmt.Errorf("ledger script: unexpected reply %v", res)
}
