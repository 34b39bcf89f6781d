package blobstore

import (
	"fmt"
	"strings"
)

// ValidateKey rejects keys that are empty, absolute, or that contain empty,
// "." or ".." segments, so that no backend can be led outside its root.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("blob key is empty")
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("blob key %q: must not start or end with /", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("blob key %q: empty, . or .. segment", key)
		}
	}
	if strings.ContainsAny(key, "\x00\\") {
		return fmt.Errorf("blob key %q: NUL or backslash", key)
	}
	return nil
}
