// Package benchenv is what spool's benchmark commands share: a
// redis-server of their own, a project on disk, and CPU samples of the
// process and of Redis.
package benchenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/stack"
)

// RedisFlag defines -redis, the URL of the Redis a command runs on:
// $SPOOL_BENCH_REDIS_URL by default; "" starts one (Redis).
func RedisFlag() *string {
	return flag.String("redis", os.Getenv("SPOOL_BENCH_REDIS_URL"), "Redis URL (default: start redis-server)")
}

// Redis opens url, or with url "" starts a redis-server from PATH on a
// free port with its files in dir. stop closes the client and stops the
// server it started.
func Redis(url, dir string) (rdb redis.UniversalClient, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if url == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, nil, fmt.Errorf("no Redis URL given and no redis-server on PATH")
		}
		port, err := testenv.FreePort()
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--maxclients", "20000")
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		stops = append(stops, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		url = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	}
	if rdb, err = stack.OpenRedis(url); err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, func() { _ = rdb.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("redis at %s does not answer", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return rdb, stop, nil
}

// Scratch makes a temporary directory named after pattern (os.MkdirTemp)
// and opens Redis in it as Redis does; stop stops Redis and removes the
// directory.
func Scratch(pattern, url string) (rdb redis.UniversalClient, dir string, stop func(), err error) {
	if dir, err = os.MkdirTemp("", pattern); err != nil {
		return nil, "", nil, err
	}
	rdb, stopRedis, err := Redis(url, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	return rdb, dir, func() { stopRedis(); _ = os.RemoveAll(dir) }, nil
}

// WriteProject writes files (paths relative to dir) under dir.
func WriteProject(dir string, files map[string]string) error {
	for p, c := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Directive is a directive file of name with limits (the attributes of
// <limits>) that may call the file-system tools.
func Directive(name, limits string) string {
	return "# " + name + "\n\n```xml\n<directive name=\"" + name + "\" version=\"1.0.0\">\n  <metadata>\n" +
		"    <description>" + name + "</description>\n    <limits " + limits + " />\n" +
		"    <permissions><execute><tool>rye/file-system/*</tool></execute></permissions>\n  </metadata>\n</directive>\n```\n"
}

// CPU is the CPU time used so far by this process and by Redis.
type CPU struct{ Self, Redis time.Duration }

// SampleCPU reads this process's rusage and Redis's INFO cpu.
func SampleCPU(ctx context.Context, rdb redis.UniversalClient) CPU {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var red time.Duration
	for k, v := range Info(ctx, rdb, "cpu") {
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			red += time.Duration(f * float64(time.Second))
		}
	}
	return CPU{self, red}
}

// Sub is c - o.
func (c CPU) Sub(o CPU) CPU { return CPU{c.Self - o.Self, c.Redis - o.Redis} }

// Per formats c divided by n as "X µs + Y µs" (process, Redis).
func (c CPU) Per(n int) string {
	return fmt.Sprintf("%d µs + %d µs", c.Self.Microseconds()/int64(n), c.Redis.Microseconds()/int64(n))
}

// Info returns a section of Redis's INFO as key → value.
func Info(ctx context.Context, rdb redis.UniversalClient, section string) map[string]string {
	out := map[string]string{}
	info, _ := rdb.Info(ctx, section).Result()
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Name  string
	Calls int64
	Usec  int64
}

// CommandStats returns INFO commandstats, the busiest command first.
func CommandStats(ctx context.Context, rdb redis.UniversalClient) []CommandStat {
	var out []CommandStat
	for k, v := range Info(ctx, rdb, "commandstats") {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		st := CommandStat{Name: name}
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(fv, 10, 64)
			switch fk {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Usec > out[j].Usec })
	return out
}

// Produce runs fn(i) for i in [0, n) on p goroutines and returns the
// first error; after one, no further i is begun.
func Produce(n, p int, fn func(i int) error) error {
	var next atomic.Int64
	errc := make(chan error, p)
	for range p {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					errc <- nil
					return
				}
				if err := fn(i); err != nil {
					next.Store(int64(n))
					errc <- err
					return
				}
			}
		}()
	}
	var first error
	for range p {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// PeakRSS is this process's peak resident set size in bytes.
func PeakRSS() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss << 10 // kilobytes on Linux
}

// Median is the median of xs.
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
