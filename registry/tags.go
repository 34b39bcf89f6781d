package registry

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Tags (Record.Tags) are set at a run's root and carried by every
// descendant; each tag "key=value" has an index of the runs that carry it
// (keyspace.TagThreads, one sorted set per shard, scored by creation
// time), written by the script that registers the run, read by List, and
// cleared by the one that forgets it.

// TagString is tag key and value as its index names it: "key=value".
func TagString(key, value string) string { return key + "=" + value }

// tagKeys are the index keys of a run (id, of directive, with tags)
// beside the threads and tenant indexes: its directive's, then its tags'
// in key order. The registry's scripts add the run to each (register,
// restore) and take it out (forget).
func (r *Registry) tagKeys(directive string, tags map[string]string, id string) []string {
	keys := make([]string, 0, len(tags)+1)
	if directive != "" {
		keys = append(keys, r.ks.DirectiveThreads(directive, id))
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		keys = append(keys, r.ks.TagThreads(TagString(k, tags[k]), id))
	}
	return keys
}

// Cursor is where a listing stopped: the last run it gave (its creation
// time and id); the next page starts after it, in the listing's order
// (newest first). Its text form (String, ParseCursor) is opaque to users.
type Cursor struct {
	CreatedMS int64
	ID        string
}

// CursorOf is the cursor after rec.
func CursorOf(rec *Record) Cursor {
	return Cursor{CreatedMS: rec.CreatedAt.UnixMilli(), ID: rec.ThreadID}
}

// String encodes c for a user to pass back.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedMS, 10) + ":" + c.ID))
}

// ParseCursor decodes what Cursor.String gave.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	ms, id, ok := strings.Cut(string(b), ":")
	n, perr := strconv.ParseInt(ms, 10, 64)
	if err != nil || !ok || perr != nil || id == "" {
		return Cursor{}, fmt.Errorf("cursor %q: not one a listing gave", s)
	}
	return Cursor{CreatedMS: n, ID: id}, nil
}

// before reports whether a run created at ms with id comes after c in
// newest-first order (it is on a later page).
func (c Cursor) before(ms int64, id string) bool {
	return ms < c.CreatedMS || ms == c.CreatedMS && id < c.ID
}

// window is the score range of f's time bounds and cursor (unix ms),
// for the indexes by time.
func (f Filter) window() (lo, hi string) {
	lo, hi = "-inf", "+inf"
	if !f.Since.IsZero() {
		lo = strconv.FormatInt(f.Since.UnixMilli(), 10)
	}
	upper := int64(-1)
	if !f.Until.IsZero() {
		upper = f.Until.UnixMilli()
	}
	if f.After != nil && (upper < 0 || f.After.CreatedMS < upper) {
		upper = f.After.CreatedMS
	}
	if upper >= 0 {
		hi = strconv.FormatInt(upper, 10)
	}
	return lo, hi
}

// inRange reports whether rec is within f's time bounds and after its
// cursor.
func (f Filter) inRange(rec *Record) bool {
	ms := rec.CreatedAt.UnixMilli()
	return (f.Since.IsZero() || !rec.CreatedAt.Before(f.Since)) &&
		(f.Until.IsZero() || !rec.CreatedAt.After(f.Until)) &&
		(f.After == nil || f.After.before(ms, rec.ThreadID))
}

// hasTags reports whether rec carries every tag of f.
func (f Filter) hasTags(rec *Record) bool {
	for k, v := range f.Tags {
		if got, ok := rec.Tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// rarestTag is the tag of tags whose index holds the fewest runs (every
// shard's, one pipeline): List reads it and checks the others on the
// records.
func (r *Registry) rarestTag(ctx context.Context, tags map[string]string) (string, error) {
	names := make([]string, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		names = append(names, TagString(k, tags[k]))
	}
	if len(names) == 1 {
		return names[0], nil
	}
	pipe := r.rdb.Pipeline()
	cards := make([][]*redis.IntCmd, len(names))
	for i, t := range names {
		for _, k := range r.ks.AllTagThreads(t) {
			cards[i] = append(cards[i], pipe.ZCard(ctx, k))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("list threads: %w", err)
	}
	best, fewest := names[0], int64(-1)
	for i, t := range names {
		var n int64
		for _, c := range cards[i] {
			n += c.Val()
		}
		if fewest < 0 || n < fewest {
			best, fewest = t, n
		}
	}
	return best, nil
}

// directiveIndexed reports whether every run is in its directive's index
// (DirectiveIndexed is set), read once per registry after it is.
func (r *Registry) directiveIndexed(ctx context.Context) bool {
	if r.dirIndexed.Load() {
		return true
	}
	n, err := r.rdb.Exists(ctx, r.ks.DirectiveIndexed()).Result()
	if err != nil || n == 0 {
		return false
	}
	r.dirIndexed.Store(true)
	return true
}

// BackfillDirectiveIndex puts every registered run in its directive's
// index (DirectiveThreads), up to batch runs a call, oldest first, from
// where the call before stopped; once every run is in, it sets
// DirectiveIndexed and listings by directive read the index. Runs
// registered meanwhile are indexed by their registration. It reports
// how many it indexed and whether it is done. Housekeeping calls it until
// it is done.
func (r *Registry) BackfillDirectiveIndex(ctx context.Context, batch int64) (int, bool, error) {
	if r.directiveIndexed(ctx) {
		return 0, true, nil
	}
	mark := r.ks.DirectiveIndexed() + ":from"
	from, skip, err := r.backfillFrom(ctx, mark)
	if err != nil {
		return 0, false, err
	}
	zs, err := r.ThreadsByTime(ctx, Window{Min: from, Max: "+inf", Offset: skip, Count: batch})
	if err != nil {
		return 0, false, fmt.Errorf("backfill the directive index: %w", err)
	}
	pipe := r.rdb.Pipeline()
	dirs := make([]*redis.StringCmd, len(zs))
	for i, z := range zs {
		dirs[i] = pipe.HGet(ctx, r.ks.Thread(z.Member.(string)), "directive")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, fmt.Errorf("backfill the directive index: %w", err)
	}
	pipe = r.rdb.Pipeline()
	var added []*redis.IntCmd
	for i, z := range zs {
		if d := dirs[i].Val(); d != "" {
			id := z.Member.(string)
			added = append(added, pipe.ZAdd(ctx, r.ks.DirectiveThreads(d, id), redis.Z{Score: z.Score, Member: id}))
		}
	}
	done := int64(len(zs)) < batch
	if done {
		pipe.Set(ctx, r.ks.DirectiveIndexed(), "1", 0)
		pipe.Del(ctx, mark)
	} else {
		pipe.Set(ctx, mark, nextFrom(zs, from, skip), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, false, fmt.Errorf("backfill the directive index: %w", err)
	}
	n := 0
	for _, c := range added {
		n += int(c.Val()) // 0 for a run its registration indexed
	}
	return n, done, nil
}

func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// backfillFrom is where the backfill's call before stopped (at mark): a
// score and how many runs of that score it took, as runs registered in
// one millisecond may outnumber a batch; from the start when none.
func (r *Registry) backfillFrom(ctx context.Context, mark string) (string, int64, error) {
	v, err := r.rdb.Get(ctx, mark).Result()
	if errors.Is(err, redis.Nil) {
		return "-inf", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("backfill the directive index: %w", err)
	}
	at, k, _ := strings.Cut(v, " ")
	return at, parseInt(k), nil
}

// nextFrom is where the next call starts after a batch zs read from
// (from, skip): the last score, and how many runs of it are done.
func nextFrom(zs []redis.Z, from string, skip int64) string {
	last := zs[len(zs)-1].Score
	k := int64(0)
	for _, z := range zs {
		if z.Score == last {
			k++
		}
	}
	at := strconv.FormatFloat(last, 'f', -1, 64)
	if at == from {
		k += skip
	}
	return at + " " + strconv.FormatInt(k, 10)
}
