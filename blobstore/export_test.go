package blobstore

// NewLocalWalking is NewLocal whose store never uses openat2, so that the
// tests cover the O_NOFOLLOW walk on kernels that have openat2.
func NewLocalWalking(dir string) (*Local, error) {
	l, err := NewLocal(dir)
	if l != nil {
		l.walkOnly = true
	}
	return l, err
}
