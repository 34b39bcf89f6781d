package scheduler

// LockToken is the token s holds its locks under, which a test writes
// to play a lock whose release Redis lost.
func LockToken(s *Scheduler) string { return s.token }
