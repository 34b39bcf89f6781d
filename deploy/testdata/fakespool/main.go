// Command fakespool stands in for the spool binary in the fleet script's
// test: it speaks the handful of commands deploy/fleet.sh uses, with the
// queue kept as files under $SPOOL_DATA_DIR/fake (pending/, running/, done/)
// instead of Redis, so the script's process handling, scaling and report
// can be tested before (and independently of) the real worker.
//
// A thread is three "turns" of FAKE_TURN_MS milliseconds each (default 50),
// counted in spool_turns_total on /metrics, and finished threads in
// spool_threads_finished_total, as spool's worker does.
// Like spool's worker, a worker that gets SIGTERM finishes the turn in
// flight, hands the thread back to the queue (pending/) and logs
// "activation handed back for shutdown" for it.
//
// FAKE_LOSE=1 makes the first worker drop one thread, which must show up as
// lost.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakespool:", err)
		os.Exit(1)
	}
}

func dir(sub string) string {
	d := filepath.Join(os.Getenv("SPOOL_DATA_DIR"), "fake", sub)
	_ = os.MkdirAll(d, 0o755)
	return d
}

func run(args []string) error {
	if len(args) < 2 && (len(args) == 0 || args[0] != "worker") {
		return errors.New("usage: fakespool worker|keys init|thread run|list|wait")
	}
	switch {
	case args[0] == "keys" && args[1] == "init":
		return os.MkdirAll(filepath.Join(os.Getenv("SPOOL_DATA_DIR"), "keys"), 0o700)
	case args[0] == "worker":
		return worker(args[1:])
	case args[0] == "thread" && args[1] == "run":
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id := "fleet-" + hex.EncodeToString(b)
		if err := os.WriteFile(filepath.Join(dir("pending"), id), nil, 0o644); err != nil {
			return err
		}
		fmt.Println(id)
		return nil
	case args[0] == "thread" && args[1] == "list":
		entries, _ := os.ReadDir(dir("done"))
		recs := []map[string]string{}
		for _, e := range entries {
			recs = append(recs, map[string]string{"thread_id": e.Name(), "status": "completed"})
		}
		out, _ := json.MarshalIndent(recs, "", "  ")
		fmt.Println(string(out))
		return nil
	case args[0] == "thread" && args[1] == "wait":
		fs := flag.NewFlagSet("wait", flag.ContinueOnError)
		timeout := fs.Duration("timeout", 600*time.Second, "")
		var ids []string
		rest := args[2:]
		for len(rest) > 0 {
			_ = fs.Parse(rest)
			if fs.NArg() == 0 {
				break
			}
			ids = append(ids, fs.Arg(0))
			rest = fs.Args()[1:]
		}
		deadline := time.Now().Add(*timeout)
		for {
			missing := 0
			for _, id := range ids {
				if _, err := os.Stat(filepath.Join(dir("done"), id)); err != nil {
					missing++
				}
			}
			if missing == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		failed := 0
		for _, id := range ids {
			st := "completed"
			if _, err := os.Stat(filepath.Join(dir("done"), id)); err != nil {
				st, failed = "running", failed+1
			}
			fmt.Printf("%s  →  %s  %s\n", id, id, st)
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d threads did not complete", failed, len(ids))
		}
		return nil
	}
	return fmt.Errorf("unknown command %v", args)
}

func worker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	conc := fs.Int("concurrency", 4, "")
	_ = fs.Duration("shutdown-timeout", 30*time.Second, "")
	addr := fs.String("metrics-addr", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var turns, finished atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE spool_turns_total counter\nspool_turns_total{directive=\"demo/fleet\",model=\"fake\"} %d\n", turns.Load())
		fmt.Fprintf(w, "# TYPE spool_threads_finished_total counter\nspool_threads_finished_total{directive=\"demo/fleet\",status=\"completed\"} %d\n", finished.Load())
	})
	go func() { _ = http.Serve(ln, mux) }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	lose := os.Getenv("FAKE_LOSE") == "1"
	turn := 50 * time.Millisecond
	if ms, err := strconv.Atoi(os.Getenv("FAKE_TURN_MS")); err == nil && ms > 0 {
		turn = time.Duration(ms) * time.Millisecond
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				entries, _ := os.ReadDir(dir("pending"))
				claimed := ""
				for _, e := range entries {
					if os.Rename(filepath.Join(dir("pending"), e.Name()), filepath.Join(dir("running"), e.Name())) == nil {
						claimed = e.Name()
						break
					}
				}
				if claimed == "" {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				handedBack := false
				for t := 1; t <= 3; t++ {
					time.Sleep(turn)
					turns.Add(1)
					if t < 3 && ctx.Err() != nil {
						_ = os.Rename(filepath.Join(dir("running"), claimed), filepath.Join(dir("pending"), claimed))
						fmt.Fprintf(os.Stderr, "level=INFO msg=\"activation handed back for shutdown\" thread_id=%s\n", claimed)
						handedBack = true
						break
					}
				}
				if handedBack {
					continue
				}
				mu.Lock()
				drop := lose
				lose = false
				mu.Unlock()
				if drop {
					continue // left in running/: a lost thread
				}
				_ = os.Rename(filepath.Join(dir("running"), claimed), filepath.Join(dir("done"), claimed))
				finished.Add(1)
				fmt.Fprintf(os.Stderr, "level=INFO msg=\"thread finished\" thread_id=%s status=completed\n", claimed)
			}
		}()
	}
	<-ctx.Done()
	wg.Wait() // in-flight "turns" finish before exit
	return nil
}
