package transcript

import (
	"encoding/hex"
	"fmt"

	"github.com/spool-run/spool/blobkey"
)

// Mark is a point of a transcript that a record kept outside it (the
// registry, thread.json) says was durable: the first Segments segments
// exist, and ChainHash is the chain hash of segment Segments
// (SegmentInfo.ChainHash). A transcript is append-only, so nothing it holds
// can reveal that its last segments were deleted; a mark can, because it
// lives elsewhere. The zero Mark asks for nothing.
type Mark struct {
	Segments  int64
	ChainHash string // "" skips the hash check
	// From names who recorded the mark, for messages ("registry").
	From string
}

// Mark is the mark of the verified transcript: its segment count and the
// chain hash of its last segment.
func (t *Transcript) Mark() Mark {
	if len(t.Segments) == 0 {
		return Mark{}
	}
	last := t.Segments[len(t.Segments)-1]
	return Mark{Segments: last.Number, ChainHash: last.ChainHash}
}

// Mark is the mark of everything the writer has committed (what was read
// when it opened, and every Checkpoint since).
func (w *Writer) Mark() Mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.segment - 1
	if n == 0 {
		return Mark{}
	}
	return Mark{Segments: n, ChainHash: hex.EncodeToString(w.h.Sum(nil))}
}

// checkMarks holds a verified transcript of n segments to marks (chainHash
// gives the chain hash of each segment a mark names): it must have at least
// as many segments as the highest mark (else the first missing segment is
// reported), and each mark's segment must end with the mark's chain hash.
// It returns the mismatches, missing first.
func checkMarks(threadID string, n int64, chainHash func(segment int64) string, marks []Mark) []*VerifyError {
	var errs []*VerifyError
	var need Mark
	for _, m := range marks {
		if m.Segments > need.Segments {
			need = m
		}
	}
	if need.Segments > n {
		errs = append(errs, &VerifyError{Key: blobkey.Segment(threadID, n+1),
			Reason: fmt.Sprintf("missing segment: %d verified, %d committed%s", n, need.Segments, markSource(need))})
	}
	for _, m := range marks {
		if m.Segments <= 0 || m.Segments > n || m.ChainHash == "" {
			continue
		}
		if got := chainHash(m.Segments); got != m.ChainHash {
			errs = append(errs, &VerifyError{Key: blobkey.Segment(threadID, m.Segments),
				Reason: fmt.Sprintf("chain hash %s differs from the committed %s%s", shortHash(got), shortHash(m.ChainHash), markSource(m))})
		}
	}
	return errs
}

func markSource(m Mark) string {
	if m.From == "" {
		return ""
	}
	return " (" + m.From + ")"
}

func shortHash(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}
