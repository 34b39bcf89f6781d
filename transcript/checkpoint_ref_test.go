package transcript

// The checkpoint path as it was before events were written without a
// second encoding (event.go appendEvent): every line through marshal of
// an Event, the payload compacted again inside it. Kept as the reference
// TestWriterAgreesWithReference holds the Writer to, and as the "old"
// side of BenchmarkWriterCheckpoint.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// signCheckpointRef returns the signed checkpoint line (without the newline).
func signCheckpointRef(ts time.Time, threadID string, seq int64, cp Checkpoint, s *Signer) ([]byte, error) {
	cp.KeyID, cp.Algo, cp.Sig = s.KeyID(), algoEd25519, ""
	payload, err := marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	unsigned, err := marshal(Event{Timestamp: ts, ThreadID: threadID, Seq: seq, Type: TypeCheckpoint, Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	tail := []byte(`"sig":""}}`)
	if !bytes.HasSuffix(unsigned, tail) {
		return nil, fmt.Errorf("checkpoint: unexpected encoding %q", unsigned[max(0, len(unsigned)-20):])
	}
	sig := b64.EncodeToString(s.Sign(checkpointMessage(unsigned)))
	line := make([]byte, 0, len(unsigned)+len(sig))
	line = append(line, unsigned[:len(unsigned)-len(`"}}`)]...)
	line = append(line, sig...)
	line = append(line, lineEnd...)
	return line, nil
}

// checkpointMessage is the message a checkpoint signature signs.
func checkpointMessage(unsigned []byte) []byte {
	msg := make([]byte, 0, len(checkpointDomain)+len(unsigned))
	msg = append(msg, checkpointDomain...)
	return append(msg, unsigned...)
}

// appendRef is Writer.Append as it was.
func (w *Writer) appendRef(eventType string, payload any) (int64, error) {
	if eventType == "" || eventType == TypeCheckpoint {
		return 0, fmt.Errorf("append to transcript %s: event type %q not allowed", w.threadID, eventType)
	}
	raw, err := marshalPayloadRef(payload)
	if err != nil {
		return 0, fmt.Errorf("append %s to transcript %s: %w", eventType, w.threadID, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return 0, w.closed
	}
	now := w.cfg.Now()
	if err := w.flushDeltaRef(now); err != nil {
		return 0, err
	}
	return w.appendLockedRef(now, eventType, raw)
}

func marshalPayloadRef(payload any) (json.RawMessage, error) {
	switch p := payload.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		if !json.Valid(p) {
			return nil, fmt.Errorf("payload is not valid JSON")
		}
		return p, nil
	case []byte:
		if !json.Valid(p) {
			return nil, fmt.Errorf("payload is not valid JSON")
		}
		return p, nil
	}
	return marshal(payload)
}

func (w *Writer) appendLockedRef(now time.Time, eventType string, payload json.RawMessage) (int64, error) {
	line, err := marshal(Event{Timestamp: now.UTC(), ThreadID: w.threadID, Seq: w.seq, Type: eventType, Payload: payload})
	if err != nil {
		return 0, fmt.Errorf("append %s to transcript %s: %w", eventType, w.threadID, err)
	}
	w.buf.Write(line)
	w.buf.WriteByte('\n')
	w.events++
	w.seq++
	return w.seq - 1, nil
}

// appendDeltaRef is Writer.AppendDelta as it was.
func (w *Writer) appendDeltaRef(text string) bool {
	if text == "" {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return false
	}
	if w.deltaKept+w.delta.Len()+len(text) > w.cfg.DeltaBudget {
		w.deltaDropped += int64(len(text))
		return false
	}
	w.delta.WriteString(text)
	now := w.cfg.Now()
	if w.delta.Len() >= w.cfg.DeltaChunk || now.Sub(w.deltaLast) >= w.cfg.DeltaInterval {
		if err := w.flushDeltaRef(now); err != nil {
			return false
		}
	}
	return true
}

func (w *Writer) flushDeltaRef(now time.Time) error {
	if w.delta.Len() == 0 {
		return nil
	}
	raw, err := marshal(TokenDelta{Text: w.delta.String()})
	if err != nil {
		return err
	}
	w.deltaKept += w.delta.Len()
	w.delta.Reset()
	w.deltaLast = now
	_, err = w.appendLockedRef(now, TypeTokenDelta, raw)
	return err
}

// checkpointRef is Writer.Checkpoint as it was.
func (w *Writer) checkpointRef(ctx context.Context, state State) (SegmentInfo, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return SegmentInfo{}, w.closed
	}
	now := w.cfg.Now()
	if err := w.flushDeltaRef(now); err != nil {
		return SegmentInfo{}, err
	}
	key := blobkey.Segment(w.threadID, w.segment)
	hc := cloneHash(w.h)
	hc.Write(w.buf.Bytes())
	cp := Checkpoint{Segment: w.segment, Events: w.events, DroppedDeltaBytes: w.deltaDropped,
		SHA256: hex.EncodeToString(hc.Sum(nil)), State: state}
	line, err := signCheckpointRef(now.UTC(), w.threadID, w.seq, cp, w.signer)
	if err != nil {
		return SegmentInfo{}, fmt.Errorf("checkpoint %s: %w", key, err)
	}
	data := make([]byte, 0, w.buf.Len()+len(line)+1)
	data = append(data, w.buf.Bytes()...)
	data = append(data, line...)
	data = append(data, '\n')
	if err := w.store.PutIfAbsent(ctx, key, data); err != nil {
		if !errors.Is(err, blobstore.ErrExists) {
			return SegmentInfo{}, fmt.Errorf("checkpoint %s: %w", key, err)
		}
		if got, gerr := w.store.Get(ctx, key); gerr != nil || !bytes.Equal(got, data) {
			w.closed = fmt.Errorf("checkpoint %s: %w", key, ErrSegmentExists)
			return SegmentInfo{}, w.closed
		}
	}
	hc.Write(line)
	hc.Write([]byte{'\n'})
	info := SegmentInfo{Key: key, Number: w.segment, FirstSeq: w.seq - int64(w.events), LastSeq: w.seq,
		Size: len(data), ChainHash: hex.EncodeToString(hc.Sum(nil)), KeyID: w.signer.KeyID(), Time: now.UTC()}
	w.h = hc
	w.segment++
	w.seq++
	w.buf.Reset()
	w.events = 0
	w.deltaKept, w.deltaDropped = 0, 0
	st := state
	w.lastState = &st
	return info, nil
}
