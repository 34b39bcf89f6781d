// Command transcript measures verifying and reconstructing a very long
// transcript: -events events (a user message, an answer with a tool call,
// the call's start and its result per turn; -turns-per-segment turns per
// checkpoint) are written to a local-directory blob store, then a second
// process verifies every segment (hash chain, signatures) and rebuilds
// the conversation with transcript.Walk and a transcript.Reconstructor
// bounded to -window bytes. Printed: the transcript's size, the time and
// rate of the verify+reconstruct, and that process's peak RSS; with
// -compare, the same for transcript.Read + Reconstruct (everything in
// memory) on the same transcript.
//
//	go run ./bench/transcript -events 1000000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

const threadID = "bench/transcript-1795400000-aaaaaaaaaa"

func main() {
	events := flag.Int("events", 1_000_000, "events to write (rounded up to whole turns of 4 events, plus one checkpoint per segment)")
	perSeg := flag.Int("turns-per-segment", 25, "turns between checkpoints")
	window := flag.Int("window", 1<<20, "bytes of conversation the reconstruction keeps (the newest messages)")
	compare := flag.Bool("compare", false, "also run transcript.Read + Reconstruct (everything in memory)")
	dir := flag.String("dir", "", "store directory (default: a temporary one, removed at the end)")
	phase := flag.String("phase", "", "internal: walk or read, in a child process")
	flag.Parse()
	var err error
	switch *phase {
	case "":
		err = run(*events, *perSeg, *window, *compare, *dir)
	case "walk", "read":
		err = measure(*phase, *dir, *window)
	default:
		err = fmt.Errorf("unknown -phase %q", *phase)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "transcript:", err)
		os.Exit(1)
	}
}

func run(events, perSeg, window int, compare bool, dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "spool-bench-transcript-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	start := time.Now()
	n, size, err := write(dir, events, perSeg)
	if err != nil {
		return err
	}
	fmt.Printf("transcript: wrote %d events (%d segments, %.1f MiB) in %s\n", n.events, n.segments, float64(size)/(1<<20), time.Since(start).Round(time.Millisecond))
	phases := []string{"walk"}
	if compare {
		phases = append(phases, "read")
	}
	for _, p := range phases {
		cmd := exec.Command(os.Args[0], "-phase", p, "-dir", dir, "-window", fmt.Sprint(window))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("phase %s: %w", p, err)
		}
	}
	return nil
}

type counts struct{ events, segments int }

// write writes the transcript and the key that verifies it.
func write(dir string, events, perSeg int) (counts, int64, error) {
	ctx := context.Background()
	store, err := blobstore.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		return counts{}, 0, err
	}
	signer, err := transcript.GenerateKey()
	if err != nil {
		return counts{}, 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "public.key"), signer.PublicKey(), 0o600); err != nil {
		return counts{}, 0, err
	}
	w, err := transcript.WriterConfig{}.Open(ctx, store, threadID, signer, transcript.NewKeyring(signer.PublicKey()))
	if err != nil {
		return counts{}, 0, err
	}
	var c counts
	appendEv := func(typ string, payload any) error {
		c.events++
		_, err := w.Append(typ, payload)
		return err
	}
	if err := appendEv(transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: "bench/transcript", Model: "scripted"}); err != nil {
		return c, 0, err
	}
	for turn := 1; c.events < events; turn++ {
		id := fmt.Sprintf("call_%d", turn)
		input := json.RawMessage(fmt.Sprintf(`{"path":"notes/%d.md","content":"turn %d: a line of notes about the work so far"}`, turn%97, turn))
		call := thread.ToolCall{ID: id, Name: "rye/file-system/fs_write", Input: input}
		for _, e := range []struct {
			typ     string
			payload any
		}{
			{transcript.TypeCognitionIn, transcript.CognitionIn{Content: fmt.Sprintf("Turn %d: continue with the next file; keep the notes short and say what changed.", turn)}},
			{transcript.TypeCognitionOut, transcript.CognitionOut{Content: fmt.Sprintf("Writing notes/%d.md with what turn %d found.", turn%97, turn),
				ToolCalls: []thread.ToolCall{call}, Model: "scripted", Usage: transcript.Usage{InputTokens: 1200, OutputTokens: 80}, Spend: 0.0016, Turn: turn}},
			{transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: id, Tool: call.Name, Input: input}},
			{transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: id, Tool: call.Name, Output: "wrote 58 bytes"}},
		} {
			if err := appendEv(e.typ, e.payload); err != nil {
				return c, 0, err
			}
		}
		if turn%perSeg == 0 || c.events >= events {
			if _, err := w.Checkpoint(ctx, transcript.State{Reason: transcript.ReasonToolResults, Status: "running", Iteration: turn}); err != nil {
				return c, 0, err
			}
			c.events++
			c.segments++
		}
	}
	infos, err := store.List(ctx, "")
	if err != nil {
		return c, 0, err
	}
	var size int64
	for _, in := range infos {
		size += in.Size
	}
	return c, size, nil
}

// measure verifies and reconstructs in this (fresh) process and prints
// the time and the peak RSS.
func measure(phase, dir string, window int) error {
	ctx := context.Background()
	store, err := blobstore.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		return err
	}
	pub, err := os.ReadFile(filepath.Join(dir, "public.key"))
	if err != nil {
		return err
	}
	keyring := transcript.NewKeyring(pub)
	start := time.Now()
	var evs, msgs, kept int64
	switch phase {
	case "walk":
		r := &transcript.Reconstructor{MaxBytes: window}
		sum, err := transcript.Walk(ctx, store, threadID, keyring, transcript.ReadOptions{Mode: transcript.Strict}, func(_ transcript.SegmentInfo, batch []transcript.Event) error {
			for _, ev := range batch {
				if err := r.Add(ev); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		evs, msgs, kept = sum.Events, r.Total(), int64(len(r.Messages()))
	case "read":
		tr, err := transcript.Read(ctx, store, threadID, keyring, transcript.Strict)
		if err != nil {
			return err
		}
		all, err := transcript.Reconstruct(tr.Events)
		if err != nil {
			return err
		}
		evs, msgs, kept = int64(len(tr.Events)), int64(len(all)), int64(len(all))
	}
	el := time.Since(start)
	name := map[string]string{"walk": "Walk + Reconstructor (streamed)", "read": "Read + Reconstruct (in memory)"}[phase]
	fmt.Printf("transcript: %s: verified %d events, rebuilt %d messages (kept %d) in %s (%.0f events/s); peak RSS %d MiB\n",
		name, evs, msgs, kept, el.Round(time.Millisecond), float64(evs)/el.Seconds(), benchenv.PeakRSS()>>20)
	return nil
}
