package stack

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DevFile is a dev file (a data dir's redis.url): it names the Redis of the `spool dev`
// running on that data dir, so that the other commands there find it. It
// holds the URL on its first line and "pid N" on its second, and it is
// true only while its dev holds an exclusive flock on it: the kernel drops
// the lock of a dev that dies, however it dies, so a file left behind is
// known stale (and removed by whoever finds it) without asking anyone to
// delete it.
type DevFile struct {
	f    *os.File
	path string
}

// DevRunningError is ClaimDevFile's refusal: a live dev holds the file.
type DevRunningError struct {
	PID int    // 0 when it has not said yet
	URL string // "" while it starts
}

func (e *DevRunningError) Error() string {
	s := "spool dev is already running on this data dir"
	switch {
	case e.PID != 0 && e.URL != "":
		s += fmt.Sprintf(" (pid %d, redis %s)", e.PID, RedactURL(e.URL))
	case e.PID != 0:
		s += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return s + "; stop it first (Ctrl-C where it runs), or use it: commands in this project find its Redis by themselves"
}

// claimPatience is how long ClaimDevFile tries for the lock: a reader
// holds it for a moment to test it (ReadDevFile).
const claimPatience = time.Second

// ClaimDevFile takes the dev file at path for this process; Publish then
// fills it in, Close removes it. A file a dead dev left is taken over.
func ClaimDevFile(path string) (*DevFile, error) {
	deadline := time.Now().Add(claimPatience)
	for {
		f, err := lockedOpen(path, os.O_CREATE|os.O_RDWR)
		if err == nil {
			if err := f.Truncate(0); err != nil { // what a dead dev left
				_ = f.Close()
				return nil, err
			}
			return &DevFile{f: f, path: path}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("dev file %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			url, pid := readDevFile(path)
			return nil, &DevRunningError{PID: pid, URL: url}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Publish writes url and this process's pid into the file.
func (d *DevFile) Publish(url string) error {
	if err := d.f.Truncate(0); err != nil {
		return fmt.Errorf("dev file %s: %w", d.path, err)
	}
	if _, err := d.f.WriteAt([]byte(fmt.Sprintf("%s\npid %d\n", url, os.Getpid())), 0); err != nil {
		return fmt.Errorf("dev file %s: %w", d.path, err)
	}
	return nil
}

// Close removes the file and lets go of it; a nil DevFile, or one closed
// already, does nothing.
func (d *DevFile) Close() {
	if d == nil || d.f == nil {
		return
	}
	_ = os.Remove(d.path) // still ours: a claim takes a file the path names (lockedOpen)
	_ = d.f.Close()
	d.f = nil
}

// ReadDevFile returns the URL and pid of the live dev that holds the dev
// file at path, or url "" when there is none: no file, or a stale one (its
// dev died; the file is removed). A dev that has claimed the file but not
// published its URL yet is given up to wait to do so.
func ReadDevFile(path string, wait time.Duration) (url string, pid int, err error) {
	deadline := time.Now().Add(wait)
	for {
		live, err := devHolds(path)
		if err != nil || !live {
			return "", 0, err
		}
		if url, pid = readDevFile(path); url != "" || time.Now().After(deadline) {
			return url, pid, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// devHolds reports whether a dev holds the file at path (an exclusive
// lock), and removes a file nobody holds. A reader's test takes a shared
// lock, which other readers' do not conflict with; the exclusive lock a
// reader takes to remove a stale file lasts a moment, so a refused
// shared lock is tried again before it counts as a dev's.
func devHolds(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dev file %s: %w", path, err)
	}
	defer f.Close()
	for try := 0; ; try++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return false, fmt.Errorf("dev file %s: %w", path, err)
		}
		if try == 3 {
			return true, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Stale: removed when no other reader holds it either.
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			_ = os.Remove(path)
		}
	}
	return false, nil
}

// readDevFile reads the URL and pid in the file at path, whatever its lock.
func readDevFile(path string) (url string, pid int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	if sc.Scan() {
		url = strings.TrimSpace(sc.Text())
	}
	if sc.Scan() {
		if n, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "pid "); ok {
			pid, _ = strconv.Atoi(n)
		}
	}
	return url, pid
}

// lockedOpen opens path and takes its exclusive flock without waiting
// (EWOULDBLOCK when someone holds it). The lock is on the file the path
// names when it returns: one that was removed (its dev stopped) or
// replaced meanwhile is let go and the path opened again.
func lockedOpen(path string, flag int) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return f, nil
		}
		_ = f.Close()
		if err2 != nil && flag&os.O_CREATE == 0 {
			return nil, err2
		}
	}
}
