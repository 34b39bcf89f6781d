package stack

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// redactedPassword replaces a password in messages.
const redactedPassword = "xxxxx"

// passwordParam matches a URL query parameter that carries a password
// (sentinel_password=, password=); group 2 is its value.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[?&;])[a-z_]*password=)([^&;#]*)`)

// userinfo returns the byte range of raw's password: everything between
// "://" and the last "@" is userinfo, and all of it after the first ":" is
// the password; a userinfo without ":" counts whole, since clients take a
// lone name as a password too. It parses nothing, so it finds the password
// of URLs that url.Parse refuses. ok is false when there is none.
func userinfo(raw string) (start, end int, ok bool) {
	begin := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		begin = i + len("://")
	}
	at := strings.LastIndexByte(raw[begin:], '@')
	if at < 0 {
		return 0, 0, false
	}
	end = begin + at
	start = begin
	if i := strings.IndexByte(raw[begin:end], ':'); i >= 0 {
		start += i + 1
	}
	return start, end, start < end
}

// RedactURL returns a Redis URL fit for a message or a log line: its
// userinfo password and every *password= query value replaced by "xxxxx".
// Malformed URLs are redacted too (see userinfo).
func RedactURL(raw string) string {
	if start, end, ok := userinfo(raw); ok {
		raw = raw[:start] + redactedPassword + raw[end:]
	}
	return passwordParam.ReplaceAllString(raw, "${1}"+redactedPassword)
}

// passwords returns every form in which raw's passwords may appear in a
// message: as written, in the pieces a parser may split it into,
// percent-decoded and Go-quoted (url.Parse's errors quote the URL with %q).
func passwords(raw string) []string {
	var found []string
	if start, end, ok := userinfo(raw); ok {
		found = append(found, raw[start:end])
	}
	for _, m := range passwordParam.FindAllStringSubmatch(raw, -1) {
		found = append(found, m[2])
	}
	var forms []string
	for _, p := range found {
		if p == "" {
			continue
		}
		forms = append(forms, p)
		// A password holding a delimiter is split there by parsers, which
		// then quote a piece ("invalid port" of "pass/word@"): hide the
		// pieces too (all but the shortest, which would mask every letter).
		for _, piece := range strings.FieldsFunc(p, func(r rune) bool { return strings.ContainsRune("/?#@:,; ", r) }) {
			if piece != p && len(piece) >= 3 {
				forms = append(forms, piece)
			}
		}
	}
	for _, f := range forms {
		if dec, err := url.PathUnescape(f); err == nil && dec != f && dec != "" {
			forms = append(forms, dec)
		}
	}
	for _, f := range forms {
		if q := strconv.Quote(f); q[1:len(q)-1] != f {
			forms = append(forms, q[1:len(q)-1])
		}
	}
	return forms
}

// MaskURLError returns err with raw's passwords removed from its message
// (see passwords), for errors whose text may quote the URL, such as
// url.Parse's and go-redis's. The result does not wrap err: its chain's
// messages hold the password.
func MaskURLError(raw string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	masked := strings.ReplaceAll(msg, raw, RedactURL(raw))
	for _, p := range passwords(raw) {
		masked = strings.ReplaceAll(masked, p, redactedPassword)
	}
	if masked == msg {
		return err
	}
	return errors.New(masked)
}
