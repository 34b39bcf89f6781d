package registry

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Tags (Record.Tags) are set at a run's root and carried by every
// descendant; each tag "key=value" has an index of the runs that carry it
// (keyspace.TagThreads, one sorted set per shard, scored by creation
// time), written by the script that registers the run, read by List, and
// cleared by the one that forgets it.

// TagString is tag key and value as its index names it: "key=value".
func TagString(key, value string) string { return key + "=" + value }

// tagKeys are the index keys of tags of thread id, in key order.
func (r *Registry) tagKeys(tags map[string]string, id string) []string {
	keys := make([]string, 0, len(tags))
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

// firstTag is the tag of f whose index List reads ("" for none): the
// first by key.
func (f Filter) firstTag() string {
	if len(f.Tags) == 0 {
		return ""
	}
	k := slices.Sorted(maps.Keys(f.Tags))[0]
	return TagString(k, f.Tags[k])
}
