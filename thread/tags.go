package thread

import (
	"regexp"
	"strings"
	"unicode"
)

// Tags label a run's tree (`--tag key=value`): set at the root, carried
// by every descendant, listed and searched by (`thread list --tag`).

// Limits of tags.
const (
	MaxTags        = 16
	MaxTagValueLen = 256
)

// Refusal codes of tags.
const (
	CodeTagInvalid  = "tag_invalid"
	CodeTagMismatch = "tag_mismatch"
)

func init() {
	AdmissionCodes[CodeTagInvalid] = AdmissionCode{2, 400}
	AdmissionCodes[CodeTagMismatch] = AdmissionCode{2, 422}
}

var tagKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$`)

// CheckTags refuses (tag_invalid) more than MaxTags tags, a key that is
// not 1 to 63 of letters, digits, '_', '.', '-', '/' starting with a
// letter or digit, and a value that is empty, longer than MaxTagValueLen
// bytes or holds a control character.
func CheckTags(tags map[string]string) error {
	if len(tags) > MaxTags {
		return Refuse(CodeTagInvalid, "%d tags: at most %d", len(tags), MaxTags)
	}
	for k, v := range tags {
		if !tagKey.MatchString(k) {
			return Refuse(CodeTagInvalid, "tag key %q: want 1 to 63 of letters, digits, '_', '.', '-', '/', starting with a letter or digit", k)
		}
		if v == "" || len(v) > MaxTagValueLen || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return Refuse(CodeTagInvalid, "tag %s=%q: want a value of 1 to %d bytes without control characters", k, v, MaxTagValueLen)
		}
	}
	return nil
}

// ParseTag reads one "key=value" (the CLI's --tag and the API's tag
// query parameter), checked as CheckTags checks it.
func ParseTag(s string) (key, value string, err error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", Refuse(CodeTagInvalid, "tag %q: want key=value", s)
	}
	if err := CheckTags(map[string]string{key: value}); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// ParseTags reads repeated "key=value" into a map; a key given twice
// with different values is refused.
func ParseTags(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, s := range list {
		k, v, err := ParseTag(s)
		if err != nil {
			return nil, err
		}
		if old, dup := out[k]; dup && old != v {
			return nil, Refuse(CodeTagInvalid, "tag %s given twice (%q and %q)", k, old, v)
		}
		out[k] = v
	}
	if err := CheckTags(out); err != nil {
		return nil, err
	}
	return out, nil
}
