package blobstore

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadKey is matched by the error of every operation on a key that
// ValidateKey refuses.
var ErrBadKey = errors.New("bad blob key")

// ValidateKey rejects keys that are empty, absolute, or that contain empty,
// "." or ".." segments, so that no backend can be led outside its root.
// The error matches ErrBadKey.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the key is empty", ErrBadKey)
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w %q: must not start or end with /", ErrBadKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: empty, . or .. segment", ErrBadKey, key)
		}
	}
	if strings.ContainsAny(key, "\x00\\") {
		return fmt.Errorf("%w %q: NUL or backslash", ErrBadKey, key)
	}
	return nil
}
