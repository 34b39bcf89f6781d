//go:build unix && !linux

package blobstore

// openat2 is Linux's; elsewhere openBeneath walks (see walkOpen).
func openat2(dir int, rel string, flags int, mode uint32) (int, bool, error) { return -1, false, nil }
