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
var entryFields = []string{"parent_id", "max", "reserved", "actual", "own", "overrun", "status", "g"}

// Entry is one ledger entry, in USD.
type Entry struct {
	ThreadID string `json:"thread_id"`
	ParentID string `json:"parent_id,omitempty"`
	// Max is the ceiling of the entry's whole subtree.
	Max float64 `json:"max"`
	// Reserved is money set aside for guaranteed descendants (reserve:
	// true) that they have not spent yet.
	Reserved float64 `json:"reserved"`
	// Actual is the subtree's spend: the entry's own charges and every
	// descendant's, live.
	Actual float64 `json:"actual"`
	// Own is the entry's own accepted charges.
	Own float64 `json:"own"`
	// Overrun is the entry's own charges that did not fit.
	Overrun float64 `json:"overrun"`
	// Remaining is Max − Reserved − Actual: what the entry's ceiling still
	// allows (an ancestor's may allow less: Room).
	Remaining float64 `json:"remaining"`
	Status    string  `json:"status"` // "active" until released
	// Guaranteed: the entry's budget was set aside from its parent
	// (Reserve) rather than admitted (Admit).
	Guaranteed bool `json:"guaranteed"`
	// The same amounts in nano-USD, exact.
	MaxNano, ReservedNano, ActualNano, OwnNano, OverrunNano int64 `json:"-"`
}

// Level names the level of a path whose room limited an operation.
type Level struct {
	ID                            string
	MaxNano, ActualNano, ResvNano int64
}

func (l Level) describe() string {
	return fmt.Sprintf("%s (ceiling %g USD, spent %g, set aside %g)", l.ID, FromNano(l.MaxNano), FromNano(l.ActualNano), FromNano(l.ResvNano))
}

// Exhausted is the spend_exceeded error of entry id, which can spend
// nothing more because level lv (the entry itself or an ancestor) has no
// room left.
func Exhausted(id string, lv Level) *thread.LimitError {
	who := "its own budget"
	if lv.ID != id {
		who = "the budget of ancestor " + lv.ID
	}
	return &thread.LimitError{Code: thread.CodeSpendExceeded, Current: FromNano(lv.ActualNano), Max: FromNano(lv.MaxNano),
		Message: fmt.Sprintf("%s has no room left: %s", who, lv.describe())}
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

// pathStep returns the KEYS and leading ARGV of a script over id and its
// path (ancestors, parent first, up to the root), followed by args.
func (l *Ledger) pathStep(id string, path []string, args ...any) ([]string, []any, error) {
	if id == "" {
		return nil, nil, errors.New("empty ledger id")
	}
	keys := make([]string, 0, len(path)+1)
	argv := make([]any, 0, len(path)+1+len(args))
	keys = append(keys, l.ks.Ledger(id))
	argv = append(argv, id)
	for _, a := range path {
		if a == "" || a == id {
			return nil, nil, fmt.Errorf("bad path %q for %s", path, id)
		}
		keys = append(keys, l.ks.Ledger(a))
		argv = append(argv, a)
	}
	return keys, append(argv, args...), nil
}

// Register creates the root entry of a tree with ceiling max (USD). It is
// idempotent: registering the same root with the same max again is a
// no-op; another max, or an id that is a child, is ErrExists.
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
		Read: func(reply any) error {
			if code(slice(reply)) == "EXISTS" {
				return fmt.Errorf("register budget for %s with max %g: %w", root, max, ErrExists)
			}
			return nil
		},
	}, nil
}

// Room is what an entry's subtree may still spend: the smallest room
// (max − actual − reserved) over the levels from the entry up to its
// first active guaranteed ancestor, or the root; Limiter is the level that
// has it.
type Room struct {
	Left     float64
	LeftNano int64
	Limiter  Level
	// Status is the entry's status.
	Status string
}

// Room reads id's room along path (its ancestors, parent first, up to the
// root). ErrNotFound when id has no entry.
func (l *Ledger) Room(ctx context.Context, id string, path []string) (Room, error) {
	keys, args, err := l.pathStep(id, path)
	if err != nil {
		return Room{}, fmt.Errorf("read budget room of %s: %w", id, err)
	}
	res, err := roomScript.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return Room{}, fmt.Errorf("read budget room of %s: %w", id, err)
	}
	switch code(res) {
	case "OK":
		if len(res) < 7 {
			return Room{}, unexpected(res)
		}
		lv := level(res, 3)
		left := integer(res, 2)
		return Room{Left: FromNano(left), LeftNano: left, Limiter: lv, Status: str(res, 1)}, nil
	case "NOPARENT":
		return Room{}, fmt.Errorf("read budget room of %s: %w", id, ErrNotFound)
	}
	return Room{}, fmt.Errorf("read budget room of %s: %w", id, pathError(res))
}

// Admission is the outcome of Admit: the entry as it is now, and Left,
// what it may spend now (the smallest room over its region; for a new
// entry at most its max).
type Admission struct {
	Entry
	Left float64
}

// AdmitOp admits id under path (its ancestors, parent first, up to the
// root) without setting money aside: a new entry gets ceiling max (USD)
// and is admitted while its parent is active and every level of the
// region above it has room (else spend_exceeded, nothing changes). An
// existing entry of the same parent is left as it is (a handoff's
// continuation shares its chain's entry) or, with reopen, reopened when
// released (a resume), as an admitted entry, while it has room left. The
// batch goes on once admitted; read, the reply sets *got.
func (l *Ledger) AdmitOp(id string, path []string, max float64, reopen bool, got *Admission) (luabatch.Op, error) {
	n, err := ToNano(max)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("admit %s: %w", id, err)
	}
	flag := "0"
	if reopen {
		flag = "1"
	}
	keys, args, err := l.pathStep(id, path, n, flag)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("admit %s: %w", id, err)
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: admitScript, Keys: keys, Args: args, Proceed: []string{"OK"}},
		Read: func(reply any) error {
			res := slice(reply)
			switch code(res) {
			case "OK":
				e, err := parseEntry(id, res[1:1+len(entryFields)])
				if err != nil {
					return err
				}
				if got != nil {
					*got = Admission{Entry: e, Left: FromNano(integer(res, 1+len(entryFields)))}
				}
				return nil
			case "INSUFFICIENT":
				lv := level(res, 2)
				return insufficient(&thread.LimitError{Code: thread.CodeSpendExceeded, Current: FromNano(lv.ActualNano), Max: FromNano(lv.MaxNano),
					Message: "no budget left for " + id + ": " + lv.describe() + " has no room"})
			}
			return admissionError(id, path, res)
		},
	}, nil
}

// Admit is AdmitOp run alone.
func (l *Ledger) Admit(ctx context.Context, id string, path []string, max float64, reopen bool) (Admission, error) {
	var a Admission
	op, err := l.AdmitOp(id, path, max, reopen, &a)
	if err != nil {
		return Admission{}, err
	}
	return a, op.Run(ctx, l.rdb, "admit "+id)
}

// ReserveOp creates id under path as a guaranteed entry: amount (USD) is
// set aside for it at once in every level of the region above it, or,
// when it does not fit, nothing changes and the error matches both
// ErrInsufficientBudget and a spend_exceeded *thread.LimitError.
// Reserving again for an existing child of the same parent is a no-op.
// The batch goes on once reserved.
func (l *Ledger) ReserveOp(id string, path []string, amount float64) (luabatch.Op, error) {
	n, err := ToNano(amount)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("reserve budget for %s: %w", id, err)
	}
	keys, args, err := l.pathStep(id, path, n)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("reserve budget for %s: %w", id, err)
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: reserveScript, Keys: keys, Args: args, Proceed: []string{"OK"}},
		Read: func(reply any) error {
			res := slice(reply)
			switch code(res) {
			case "OK":
				return nil
			case "INSUFFICIENT":
				lv := level(res, 2)
				left := FromNano(integer(res, 1))
				return insufficient(&thread.LimitError{Code: thread.CodeSpendExceeded, Current: amount, Max: left,
					Message: fmt.Sprintf("cannot set %g USD aside for %s: %s has %g USD left", amount, id, lv.describe(), left)})
			}
			return admissionError(id, path, res)
		},
	}, nil
}

// Reserve is ReserveOp run alone.
func (l *Ledger) Reserve(ctx context.Context, id string, path []string, amount float64) error {
	op, err := l.ReserveOp(id, path, amount)
	if err != nil {
		return err
	}
	return op.Run(ctx, l.rdb, "reserve budget for "+id)
}

// insufficientError is a refused admission or reservation: it reads as
// its spend_exceeded *thread.LimitError and matches ErrInsufficientBudget
// too.
type insufficientError struct{ le *thread.LimitError }

func insufficient(le *thread.LimitError) error { return insufficientError{le} }

func (e insufficientError) Error() string   { return e.le.Error() }
func (e insufficientError) Unwrap() []error { return []error{ErrInsufficientBudget, e.le} }

func admissionError(id string, path []string, res []any) error {
	switch code(res) {
	case "EXISTS":
		return fmt.Errorf("budget of %s: %w (parent %q)", id, ErrExists, str(res, 1))
	case "NOPARENT":
		p := ""
		if len(path) > 0 {
			p = path[0]
		}
		return fmt.Errorf("budget of %s: parent %s: %w", id, p, ErrNotFound)
	case "RELEASED":
		return fmt.Errorf("budget of %s: %w (%s)", id, ErrReleased, str(res, 1))
	}
	return fmt.Errorf("budget of %s: %w", id, pathError(res))
}

// Charged is the outcome of a charge: the entry after it, Left (the
// smallest room over its region after the charge: 0 means the thread can
// spend nothing more) and Limiter, the level that has that room.
type Charged struct {
	Entry
	Left    float64
	Limiter Level
}

// Charge adds amount (USD) to id's spend and to every ancestor's on path
// at once, once per key: a retry with the same key changes nothing and
// reports the first outcome. A charge that does not fit in the smallest
// room along the path is clamped (the part that fits is spent, the rest
// goes to the entry's Overrun) and returns a spend_exceeded
// *thread.LimitError naming the level that had no room: the thread must
// stop.
func (l *Ledger) Charge(ctx context.Context, id string, path []string, key string, amount float64) (Charged, error) {
	var c Charged
	op, err := l.ChargeOp(id, path, key, amount, func(got Charged, _ error) { c = got })
	if err != nil {
		return Charged{}, err
	}
	err = op.Run(ctx, l.rdb, "charge "+id)
	return c, err
}

// ReportActual reports id's total own spend so far (USD), as the spec's
// report_actual. It is absolute and monotonic: only the part above what
// was already charged (own + overrun) is applied, with Charge's clamping;
// a lower or repeated report changes nothing.
func (l *Ledger) ReportActual(ctx context.Context, id string, path []string, actual float64) (Charged, error) {
	n, err := ToNano(actual)
	if err != nil {
		return Charged{}, fmt.Errorf("report actual for %s: %w", id, err)
	}
	var c Charged
	op, err := l.chargeOp(id, path, "", n, "abs", func(got Charged, _ error) { c = got })
	if err != nil {
		return Charged{}, err
	}
	err = op.Run(ctx, l.rdb, "charge "+id)
	return c, err
}

// ChargeOp is Charge as a step of a batch (luabatch). The batch goes on
// after a charge that was applied, clamped or not: read, the reply gives
// Charge's outcome and error (a spend_exceeded *thread.LimitError when
// clamped) to done, when not nil.
func (l *Ledger) ChargeOp(id string, path []string, key string, amount float64, done func(Charged, error)) (luabatch.Op, error) {
	n, err := ToNano(amount)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("charge %s: %w", id, err)
	}
	if key == "" {
		return luabatch.Op{}, fmt.Errorf("charge %s: empty idempotency key", id)
	}
	return l.chargeOp(id, path, key, n, "add", done)
}

// chargeOp is chargeScript's step for id: key, n (nano-USD), mode "add" or
// "abs"; done as ChargeOp's.
func (l *Ledger) chargeOp(id string, path []string, key string, n int64, mode string, done func(Charged, error)) (luabatch.Op, error) {
	keys, args, err := l.pathStep(id, path, key, n, mode)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("charge %s: %w", id, err)
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: chargeScript, Keys: keys, Args: args, Proceed: []string{"ok", "over"}},
		Read: func(reply any) error {
			c, err := chargeReply(id, slice(reply))
			if done != nil {
				done(c, err)
			}
			return err
		},
	}, nil
}

func chargeReply(id string, res []any) (Charged, error) {
	switch code(res) {
	case "ok", "over":
		nf := len(entryFields)
		if len(res) < 1+nf+5 {
			return Charged{}, unexpected(res)
		}
		e, err := parseEntry(id, res[1:1+nf])
		if err != nil {
			return Charged{}, err
		}
		c := Charged{Entry: e, Left: FromNano(integer(res, 1+nf)), Limiter: level(res, 2+nf)}
		if code(res) == "ok" {
			return c, nil
		}
		who := "its own budget"
		if c.Limiter.ID != id {
			who = "the budget of ancestor " + c.Limiter.ID
		}
		return c, fmt.Errorf("charge %s: %w", id, &thread.LimitError{Code: thread.CodeSpendExceeded,
			Current: FromNano(c.Limiter.ActualNano), Max: FromNano(c.Limiter.MaxNano),
			Message: fmt.Sprintf("thread %s went %g USD over %s: %s is spent", id, e.Overrun, who, c.Limiter.describe())})
	case "NOTFOUND":
		return Charged{}, fmt.Errorf("charge %s: %w", id, ErrNotFound)
	case "RELEASED":
		return Charged{}, fmt.Errorf("charge %s: entry is %s: %w", id, str(res, 1), ErrReleased)
	}
	return Charged{}, fmt.Errorf("charge %s: %w", id, pathError(res))
}

// Release marks id's entry final with status (completed, error,
// cancelled, ...). A guaranteed entry gives back to the levels above it
// what it neither spent nor set aside for guaranteed descendants; an
// admitted entry's spend is already in every ancestor, so only its status
// changes. Descendants still running keep charging through it, under its
// ceiling. Releasing twice is a no-op.
func (l *Ledger) Release(ctx context.Context, id string, path []string, status string) error {
	op, err := l.ReleaseOp(id, path, status)
	if err != nil {
		return err
	}
	return op.Run(ctx, l.rdb, "release "+id)
}

// ReleaseOp is Release as a step of a batch (luabatch): the batch goes on
// once the entry is released (now or before).
func (l *Ledger) ReleaseOp(id string, path []string, status string) (luabatch.Op, error) {
	if status == "" || status == StatusActive {
		return luabatch.Op{}, fmt.Errorf("release %s: final status %q is not a final status", id, status)
	}
	keys, args, err := l.pathStep(id, path, status)
	if err != nil {
		return luabatch.Op{}, fmt.Errorf("release %s: %w", id, err)
	}
	return luabatch.Op{
		Step: luabatch.Step{Script: releaseScript, Keys: keys, Args: args, Proceed: []string{"OK", "ALREADY"}},
		Read: func(reply any) error {
			res := slice(reply)
			switch code(res) {
			case "OK", "ALREADY":
				return nil
			case "NOTFOUND":
				return fmt.Errorf("release %s: %w", id, ErrNotFound)
			}
			return fmt.Errorf("release %s: %w", id, pathError(res))
		},
	}, nil
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

// GetMany returns the entries of ids in one round trip, by id; ids
// without an entry are left out.
func (l *Ledger) GetMany(ctx context.Context, ids []string) (map[string]Entry, error) {
	out := make(map[string]Entry, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, l.ks.Ledger(id), entryFields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("get budgets: %w", err)
	}
	for i, c := range cmds {
		vals := c.Val()
		if len(vals) < 2 || vals[1] == nil {
			continue
		}
		e, err := parseEntry(ids[i], vals)
		if err != nil {
			return nil, err
		}
		out[ids[i]] = e
	}
	return out, nil
}

func parseEntry(id string, vals []any) (Entry, error) {
	if len(vals) != len(entryFields) {
		return Entry{}, fmt.Errorf("ledger entry %s: %d fields, want %d", id, len(vals), len(entryFields))
	}
	e := Entry{ThreadID: id}
	s := func(i int) string { v, _ := vals[i].(string); return v }
	e.ParentID, e.Status, e.Guaranteed = s(0), s(6), s(7) == "1"
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

// level reads a reply's limiter tail (id, max, actual, reserved) at i.
func level(res []any, i int) Level {
	return Level{ID: str(res, i), MaxNano: integer(res, i+1), ActualNano: integer(res, i+2), ResvNano: integer(res, i+3)}
}

// pathError is the error of a reply {"PATH", message} or {"NOPARENT",
// id} (or any other).
func pathError(res []any) error {
	switch code(res) {
	case "PATH":
		return fmt.Errorf("%w: %s", ErrPath, str(res, 1))
	case "NOPARENT":
		return fmt.Errorf("%w: ancestor %s has no ledger entry", ErrPath, str(res, 1))
	}
	return unexpected(res)
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

func integer(res []any, i int) int64 {
	if i >= len(res) {
		return 0
	}
	switch v := res[i].(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

// slice is a batch step's reply as the []any a script's own Run gives.
func slice(reply any) []any {
	res, _ := reply.([]any)
	return res
}

func unexpected(res []any) error {
	return fmt.Errorf("ledger script: unexpected reply %v", res)
}
