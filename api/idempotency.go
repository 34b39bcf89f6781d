package api

import (
	"net/http"
	"strings"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Idempotent starts: POST /v1/threads and /v1/graphs take an
// Idempotency-Key header (as in the IETF draft of that name). The first
// start of a key in its tenant answers 201 with the run; a start of the
// same key and request within the retention answers 200 with the run as
// it is now, "existing": true and Idempotent-Replayed: true; the same key
// with another request is 422 idempotency_key_reused.

// idempotencyKeyHeader and replayedHeader are the headers of an
// idempotent start.
const (
	idempotencyKeyHeader = "Idempotency-Key"
	replayedHeader       = "Idempotent-Replayed"
)

// idempotencyKey reads the request's Idempotency-Key: "" when there is
// none; else an RFC 9651 string ("...", with \" and \\ escapes) or the
// bare value, which must be 1 to 255 printable ASCII characters without
// spaces (idempotency_key_invalid otherwise).
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values(idempotencyKeyHeader)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", thread.Refuse(thread.CodeIdempotencyKeyInvalid, "%d Idempotency-Key headers: want one", len(vals))
	}
	v := strings.Trim(vals[0], " \t")
	if strings.HasPrefix(v, `"`) {
		s, ok := sfString(v)
		if !ok {
			return "", thread.Refuse(thread.CodeIdempotencyKeyInvalid, "Idempotency-Key: not a structured-field string (RFC 9651)")
		}
		v = s
	}
	if err := thread.CheckIdempotencyKey(v); err != nil {
		return "", err
	}
	return v, nil
}

// sfString decodes an RFC 9651 sf-string: a quoted run of printable ASCII
// in which only \" and \\ are escapes, with nothing after its closing
// quote.
func sfString(v string) (string, bool) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), i == len(v)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

// writeStarted answers a start of rec at location: 201, or, when an
// idempotent start found its key's run, 200 with Idempotent-Replayed.
func writeStarted(w http.ResponseWriter, location string, rec *spooltype.Record) {
	w.Header().Set("Location", location)
	status := http.StatusCreated
	if rec.Existing != nil && *rec.Existing {
		w.Header().Set(replayedHeader, "true")
		status = http.StatusOK
	}
	writeJSON(w, status, rec)
}
