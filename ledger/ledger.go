package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/thread"
)

// StatusActive is the status of an entry that has not released.
const StatusActive = "active"

// entryFields is the HMGET order, and the order of an entry's fields in
// ledger.lua's replies.
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
	rdb *redisfn.Client
	ks  keyspace.Space
}

// New returns a ledger on rdb (shared when it is a *redisfn.Client, else
// wrapped in one) whose keys are built by ks.
func New(rdb redis.UniversalClient, ks keyspace.Space) *Ledger {
	return &Ledger{rdb: redisfn.NewClient(rdb), ks: ks}
}

// Lua is ledger.lua: the ledger's operations as the functions of the Lua
// table ledger, each documented there with its keys, arguments, reply
// and refusals. The ledger's scripts are Lua and a call of one function;
// a script of another package that must run one in the same atomic step
// as its own (package orchestrator's start.lua and finalize.lua) starts
// with Lua too, and reads the function's refusals with RefusalError.
//
//go:embed ledger.lua
var Lua string

// The ledger's scripts: Lua, and a call of one of its functions with the
// script's KEYS and ARGV, as Redis Functions (package redisfn: Lua is
// defined once per server, not on every call).
var (
	registerScript = script("register")
	roomScript     = script("room")
	admitScript    = script("admit")
	reserveScript  = script("reserve")
	chargeScript   = script("charge")
	releaseScript  = script("release")
)

func script(fn string) *redisfn.Script {
	return redisfn.New(fn, Lua, "return ledger."+fn+"(KEYS, ARGV)")
}

// PathArgs is how ledger.lua's functions take entry id and its path
// (ancestors, parent first, up to the root), as Commit's layout is
// registry.CommitArgs: keys, the entry's key then its ancestors'; and
// ids, the leading ARGV, their ids. A function's own arguments follow
// ids. For a script of another package that runs one in the same atomic
// step as its own (package orchestrator's start.lua, checkpoint.lua,
// finalize.lua, restore.lua), which passes len(keys) to say where the
// path ends.
func (l *Ledger) PathArgs(id string, path []string) (keys []string, ids []any, err error) {
	if id == "" {
		return nil, nil, errors.New("empty ledger id")
	}
	keys = make([]string, 0, len(path)+1)
	ids = make([]any, 0, len(path)+1)
	keys = append(keys, l.ks.Ledger(id))
	ids = append(ids, id)
	for _, a := range path {
		if a == "" || a == id {
			return nil, nil, fmt.Errorf("bad path %q for %s", path, id)
		}
		keys = append(keys, l.ks.Ledger(a))
		ids = append(ids, a)
	}
	return keys, ids, nil
}

// run runs s, ledger.lua's function fn, over id and path (amount: what it
// asks for, USD) and returns its reply, or its refusal as the ledger's
// error (RefusalError), or its failure wrapped.
func (l *Ledger) run(ctx context.Context, s *redisfn.Script, fn, id string, path []string, amount float64, args ...any) ([]any, error) {
	keys, ids, err := l.PathArgs(id, path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", failure[fn]+id, err)
	}
	res, err := s.Run(ctx, l.rdb, keys, append(ids, args...)...).Slice()
	if err != nil {
		if rerr := RefusalError(fn, id, path, amount, err); rerr != nil {
			return nil, rerr
		}
		return nil, fmt.Errorf("%s: %w", failure[fn]+id, err)
	}
	return res, nil
}

// failure and refusal begin the errors of each function's failures and
// refusals, before the entry's id.
var (
	failure = map[string]string{"register": "register budget for ", "room": "read budget room of ", "admit": "admit ",
		"reserve": "reserve budget for ", "charge": "charge ", "release": "release ", "restore": "restore budget of "}
	refusal = map[string]string{"register": "register budget for ", "room": "read budget room of ", "admit": "budget of ",
		"reserve": "budget of ", "charge": "charge ", "release": "release ", "restore": "restore budget of "}
)

// RefusalError is the error the Ledger method of ledger.lua's function fn
// ("register", "room", "admit", "reserve", "charge", "release", "restore") returns
// when the function refused with err, run on entry id with path, asking
// for amount (USD: a new entry's max, a reservation): ErrNotFound,
// ErrExists, ErrReleased, ErrPath, or an ErrInsufficientBudget that is a
// spend_exceeded *thread.LimitError too. Nil when err is no refusal of
// ledger.lua's.
func RefusalError(fn, id string, path []string, amount float64, err error) error {
	r, ok := reply.Refused(err)
	if !ok {
		return nil
	}
	what := refusal[fn] + id
	admission := fn == "admit" || fn == "reserve"
	switch r.Code {
	case "NOENTRY":
		switch {
		case admission:
			parent := ""
			if len(path) > 0 {
				parent = path[0]
			}
			return fmt.Errorf("%s: parent %s: %w", what, parent, ErrNotFound)
		case r.Field(0) == id:
			return fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		return fmt.Errorf("%s: %w: ancestor %s has no ledger entry", what, ErrPath, r.Field(0))
	case "ENTRYEXISTS":
		if fn == "register" {
			return fmt.Errorf("%s with max %g: %w", what, amount, ErrExists)
		}
		return fmt.Errorf("%s: %w (parent %q)", what, ErrExists, r.Field(0))
	case "RELEASED":
		if admission {
			return fmt.Errorf("%s: %w (%s)", what, ErrReleased, r.Field(0))
		}
		return fmt.Errorf("%s: entry is %s: %w", what, r.Field(0), ErrReleased)
	case "INSUFFICIENT":
		lv := Level{ID: r.Text(4), MaxNano: r.Int(1), ActualNano: r.Int(2), ResvNano: r.Int(3)}
		if fn == "reserve" {
			left := FromNano(r.Int(0))
			return insufficient(&thread.LimitError{Code: thread.CodeSpendExceeded, Current: amount, Max: left,
				Message: fmt.Sprintf("cannot set %g USD aside for %s: %s has %g USD left", amount, id, lv.describe(), left)})
		}
		return insufficient(&thread.LimitError{Code: thread.CodeSpendExceeded, Current: FromNano(lv.ActualNano), Max: FromNano(lv.MaxNano),
			Message: "no budget left for " + id + ": " + lv.describe() + " has no room"})
	case "PATH":
		return fmt.Errorf("%s: %w: %s", what, ErrPath, r.Text(0))
	}
	return nil
}

// Register creates the root entry of a tree with a ceiling (USD). It is
// idempotent: registering the same root with the same ceiling again is a
// no-op; another ceiling, or an id that is a child, is ErrExists.
func (l *Ledger) Register(ctx context.Context, root string, ceiling float64) error {
	n, err := ToNano(ceiling)
	if err != nil {
		return fmt.Errorf("register budget for %s: %w", root, err)
	}
	if root == "" {
		return errors.New("register budget: empty thread id")
	}
	err = registerScript.Run(ctx, l.rdb, []string{l.ks.Ledger(root)}, n).Err()
	if rerr := RefusalError("register", root, nil, ceiling, err); rerr != nil {
		return rerr
	}
	if err != nil {
		return fmt.Errorf("register budget for %s: %w", root, err)
	}
	return nil
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
	res, err := l.run(ctx, roomScript, "room", id, path, 0)
	if err != nil {
		return Room{}, err
	}
	if len(res) < 6 {
		return Room{}, reply.Unexpected("ledger room", res)
	}
	left := reply.Int(res[1])
	return Room{Left: FromNano(left), LeftNano: left, Limiter: level(res, 2), Status: reply.String(res[0])}, nil
}

// Admission is the outcome of Admit: the entry as it is now, and Left,
// what it may spend now (the smallest room over its region; for a new
// entry at most its max).
type Admission struct {
	Entry
	Left float64
}

// Admit admits id under path (its ancestors, parent first, up to the
// root) without setting money aside: a new entry gets the ceiling (USD)
// and is admitted while its parent is active and every level of the
// region above it has room (else spend_exceeded, nothing changes). An
// existing entry of the same parent is left as it is (a handoff's
// continuation shares its chain's entry) or, with reopen, reopened when
// released (a resume), as an admitted entry, while it has room left.
func (l *Ledger) Admit(ctx context.Context, id string, path []string, ceiling float64, reopen bool) (Admission, error) {
	n, err := ToNano(ceiling)
	if err != nil {
		return Admission{}, fmt.Errorf("admit %s: %w", id, err)
	}
	flag := "0"
	if reopen {
		flag = "1"
	}
	res, err := l.run(ctx, admitScript, "admit", id, path, ceiling, n, flag)
	if err != nil {
		return Admission{}, err
	}
	nf := len(entryFields)
	if len(res) < nf+1 {
		return Admission{}, reply.Unexpected("ledger admit", res)
	}
	e, err := parseEntry(id, res[:nf])
	if err != nil {
		return Admission{}, err
	}
	return Admission{Entry: e, Left: FromNano(reply.Int(res[nf]))}, nil
}

// Reserve creates id under path as a guaranteed entry: amount (USD) is
// set aside for it at once in every level of the region above it, or,
// when it does not fit, nothing changes and the error matches both
// ErrInsufficientBudget and a spend_exceeded *thread.LimitError.
// Reserving again for an existing child of the same parent is a no-op.
func (l *Ledger) Reserve(ctx context.Context, id string, path []string, amount float64) error {
	n, err := ToNano(amount)
	if err != nil {
		return fmt.Errorf("reserve budget for %s: %w", id, err)
	}
	_, err = l.run(ctx, reserveScript, "reserve", id, path, amount, n)
	return err
}

// insufficientError is a refused admission or reservation: it reads as
// its spend_exceeded *thread.LimitError and matches ErrInsufficientBudget
// too.
type insufficientError struct{ le *thread.LimitError }

func insufficient(le *thread.LimitError) error { return insufficientError{le} }

func (e insufficientError) Error() string   { return e.le.Error() }
func (e insufficientError) Unwrap() []error { return []error{ErrInsufficientBudget, e.le} }

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
	n, err := ToNano(amount)
	if err != nil {
		return Charged{}, fmt.Errorf("charge %s: %w", id, err)
	}
	if key == "" {
		return Charged{}, fmt.Errorf("charge %s: empty idempotency key", id)
	}
	return l.charge(ctx, id, path, key, n, "add")
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
	return l.charge(ctx, id, path, "", n, "abs")
}

// charge runs ledger.charge for id: key, n (nano-USD), mode "add" or "abs".
func (l *Ledger) charge(ctx context.Context, id string, path []string, key string, n int64, mode string) (Charged, error) {
	res, err := l.run(ctx, chargeScript, "charge", id, path, FromNano(n), key, n, mode)
	if err != nil {
		return Charged{}, err
	}
	return ReadCharged(id, res)
}

// ReadCharged reads the reply of ledger.lua's charge on entry id (in the
// reply of the script that called it): the charge's outcome, and for a
// clamped charge a spend_exceeded *thread.LimitError naming the level
// that had no room.
func ReadCharged(id string, v any) (Charged, error) {
	res := reply.Array(v)
	nf := len(entryFields)
	if len(res) < 1+nf+5 {
		return Charged{}, reply.Unexpected("ledger charge", v)
	}
	e, err := parseEntry(id, res[1:1+nf])
	if err != nil {
		return Charged{}, err
	}
	c := Charged{Entry: e, Left: FromNano(reply.Int(res[1+nf])), Limiter: level(res, 2+nf)}
	if reply.Int(res[0]) == 0 {
		return c, nil
	}
	who := "its own budget"
	if c.Limiter.ID != id {
		who = "the budget of ancestor " + c.Limiter.ID
	}
	return c, fmt.Errorf("charge %s: %w", id, &thread.LimitError{Code: thread.CodeSpendExceeded,
		Current: FromNano(c.Limiter.ActualNano), Max: FromNano(c.Limiter.MaxNano),
		Message: fmt.Sprintf("thread %s went %g USD over %s: %s is spent", id, e.Overrun, who, c.Limiter.describe())})
}

// Release marks id's entry final with status (completed, error,
// cancelled, ...). A guaranteed entry gives back to the levels above it
// what it neither spent nor set aside for guaranteed descendants; an
// admitted entry's spend is already in every ancestor, so only its status
// changes. Descendants still running keep charging through it, under its
// ceiling. Releasing twice is a no-op.
func (l *Ledger) Release(ctx context.Context, id string, path []string, status string) error {
	if status == "" || status == StatusActive {
		return fmt.Errorf("release %s: final status %q is not a final status", id, status)
	}
	_, err := l.run(ctx, releaseScript, "release", id, path, 0, status)
	return err
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
	return Level{ID: reply.String(reply.At(res, i)), MaxNano: reply.Int(reply.At(res, i+1)),
		ActualNano: reply.Int(reply.At(res, i+2)), ResvNano: reply.Int(reply.At(res, i+3))}
}
