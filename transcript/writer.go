package transcript

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// ErrSegmentExists is returned by Checkpoint when the segment it would write
// already exists with other content: another worker owns the thread now.
// The caller must treat it as a lost lease and stop; the Writer refuses all
// further writes.
var ErrSegmentExists = errors.New("transcript segment already written by another writer")

// ErrWriterClosed is returned after Close or after ErrSegmentExists.
var ErrWriterClosed = errors.New("transcript writer closed")

// WriterConfig tunes a Writer. The zero value gives the defaults.
type WriterConfig struct {
	// DeltaInterval: token deltas are coalesced into at most one token_delta
	// event per interval... Default 100ms.
	DeltaInterval time.Duration
	// DeltaChunk: ...or per this many bytes, whichever comes first.
	// Default 2048.
	DeltaChunk int
	// DeltaBudget is the most token_delta text one segment keeps; text
	// beyond it is dropped (and counted in the checkpoint). Default 256 KiB.
	DeltaBudget int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults fills the defaults documented on the fields.
func (c WriterConfig) WithDefaults() WriterConfig {
	if c.DeltaInterval <= 0 {
		c.DeltaInterval = 100 * time.Millisecond
	}
	if c.DeltaChunk <= 0 {
		c.DeltaChunk = 2048
	}
	if c.DeltaBudget <= 0 {
		c.DeltaBudget = 256 << 10
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Writer appends events to a thread's transcript. Events are buffered in
// memory and committed, with a signed checkpoint, as one immutable segment
// by Checkpoint. Safe for concurrent use.
type Writer struct {
	cfg      WriterConfig
	store    blobstore.Store
	threadID string
	signer   *Signer
	resumed  *Transcript

	mu        sync.Mutex
	closed    error
	h         hash.Hash // over every committed byte
	segment   int64     // number of the next segment
	seq       int64     // seq of the next event
	buf       bytes.Buffer
	events    int // events in buf
	lastState *State
	attest    map[string]string // artifacts the next checkpoint attests

	delta        strings.Builder // pending coalesced delta text
	deltaLast    time.Time       // when the last token_delta event was emitted
	deltaKept    int             // delta bytes emitted in this segment
	deltaDropped int64           // delta bytes dropped in this segment

	observe func(line []byte) // Observe's
}

// OpenWriter opens the transcript of threadID for appending with the default
// config. Existing segments are read and verified strictly with keyring (a
// transcript that does not verify cannot be continued), held to marks
// (ReadOptions.Marks: pass what the registry recorded, so that a transcript
// whose last segments were deleted is not continued as if they had never
// been written); the writer continues their segment numbering, seq and
// hash chain. Resumed returns what was read.
func OpenWriter(ctx context.Context, store blobstore.Store, threadID string, signer *Signer, keyring *Keyring, marks ...Mark) (*Writer, error) {
	return WriterConfig{}.Open(ctx, store, threadID, signer, keyring, marks...)
}

// Open is OpenWriter with this config.
func (c WriterConfig) Open(ctx context.Context, store blobstore.Store, threadID string, signer *Signer, keyring *Keyring, marks ...Mark) (*Writer, error) {
	if signer == nil {
		return nil, fmt.Errorf("open transcript writer %s: no signer", threadID)
	}
	tr, v, err := read(ctx, store, threadID, keyring, ReadOptions{Mode: Strict, Marks: marks})
	if err != nil {
		return nil, fmt.Errorf("open transcript writer %s: %w", threadID, err)
	}
	return &Writer{
		cfg: c.WithDefaults(), store: store, threadID: threadID, signer: signer, resumed: tr,
		h: v.h, segment: v.nextSegment, seq: v.nextSeq, lastState: v.lastState,
	}, nil
}

// CreateWriter starts the transcript of a thread known to have none yet
// (its first activation), without listing or reading the store. Should a
// segment exist after all, the first Checkpoint fails with
// ErrSegmentExists, exactly as a zombie writer's would, and changes
// nothing.
func CreateWriter(threadID string, store blobstore.Store, signer *Signer) (*Writer, error) {
	return WriterConfig{}.Create(threadID, store, signer)
}

// Create is CreateWriter with this config.
func (c WriterConfig) Create(threadID string, store blobstore.Store, signer *Signer) (*Writer, error) {
	if signer == nil {
		return nil, fmt.Errorf("create transcript writer %s: no signer", threadID)
	}
	if err := validateThreadID(threadID); err != nil {
		return nil, err
	}
	v := newVerifier(threadID, nil)
	return &Writer{
		cfg: c.WithDefaults(), store: store, threadID: threadID, signer: signer, resumed: &Transcript{ThreadID: threadID},
		h: v.h, segment: v.nextSegment, seq: v.nextSeq,
	}, nil
}

// Resumed is the verified transcript that existed when the writer opened
// (empty for a new thread): feed its Events to Reconstruct, and its
// LastState to the turn loop.
func (w *Writer) Resumed() *Transcript { return w.resumed }

// ThreadID is the thread this writer appends to.
func (w *Writer) ThreadID() string { return w.threadID }

// NextSegment is the number the next Checkpoint will write.
func (w *Writer) NextSegment() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.segment
}

// Observe has fn receive every event line appended from now on (the JSONL
// line, without its newline, that the next segment will hold) and returns
// the lines appended before and not yet committed. fn is called with the
// writer's lock held: it must neither block nor call the writer, and must
// copy the line to keep it. Observe(nil) stops.
func (w *Writer) Observe(fn func(line []byte)) (buffered [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.observe = fn
	if fn == nil {
		return nil
	}
	for line := range bytes.Lines(w.buf.Bytes()) {
		buffered = append(buffered, bytes.Clone(bytes.TrimSuffix(line, []byte{'\n'})))
	}
	return buffered
}

// Pending is the number of buffered events not yet committed.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events
}

// Append buffers an event; payload is marshalled to JSON (a
// json.RawMessage or []byte is taken as is). It returns the event's seq.
// Events are never dropped; they are committed by the next Checkpoint.
func (w *Writer) Append(eventType string, payload any) (int64, error) {
	if eventType == "" || eventType == TypeCheckpoint {
		return 0, fmt.Errorf("append to transcript %s: event type %q not allowed", w.threadID, eventType)
	}
	raw, err := marshalPayload(payload)
	if err != nil {
		return 0, fmt.Errorf("append %s to transcript %s: %w", eventType, w.threadID, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return 0, w.closed
	}
	now := w.cfg.Now()
	if err := w.flushDelta(now); err != nil {
		return 0, err
	}
	return w.appendLocked(now, eventType, raw)
}

// marshalPayload returns the payload as compact JSON, as the line's
// encoding takes it: marshalled, or JSON text compacted.
func marshalPayload(payload any) (json.RawMessage, error) {
	var raw []byte
	switch p := payload.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		return marshal(payload)
	}
	var c bytes.Buffer
	if json.Compact(&c, raw) != nil {
		return nil, fmt.Errorf("payload is not valid JSON")
	}
	return c.Bytes(), nil
}

// appendLocked buffers an event line; payload is compact JSON.
func (w *Writer) appendLocked(now time.Time, eventType string, payload json.RawMessage) (int64, error) {
	b := w.buf.AvailableBuffer()
	line, err := appendEvent(b, now.UTC(), w.threadID, w.seq, eventType, payload)
	if err != nil {
		return 0, fmt.Errorf("append %s to transcript %s: %w", eventType, w.threadID, err)
	}
	w.buf.Write(append(line, '\n')) // built in the buffer's free room when it fits
	if w.observe != nil {
		w.observe(line)
	}
	w.events++
	w.seq++
	return w.seq - 1, nil
}

// AppendDelta records streamed model text. It is droppable: text is
// coalesced and emitted as one token_delta event per DeltaInterval or
// DeltaChunk bytes, and text beyond the segment's DeltaBudget is dropped.
// It reports whether the text was kept. The full text is expected in the
// turn's cognition_out event anyway.
func (w *Writer) AppendDelta(text string) bool {
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
		if err := w.flushDelta(now); err != nil {
			return false
		}
	}
	return true
}

func (w *Writer) flushDelta(now time.Time) error {
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
	_, err = w.appendLocked(now, TypeTokenDelta, raw)
	return err
}

// Attest has the next Checkpoint carry the SHA-256 of data as artifact
// name (ArtifactThreadJSON, ArtifactCapabilities): a file the caller writes
// beside the transcript, unsigned, once that checkpoint is durable, and
// that a reader verifies by finding its hash in a verified checkpoint
// (Transcript.Attested). Attesting a name again before the checkpoint
// replaces it; a failed Checkpoint keeps what was attested for its retry.
func (w *Writer) Attest(name string, data []byte) {
	sum := sha256.Sum256(data)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.attest == nil {
		w.attest = map[string]string{}
	}
	w.attest[name] = hex.EncodeToString(sum[:])
}

// Checkpoint commits the buffered events and a signed checkpoint carrying
// state (and what Attest attested) as the next segment, create-only. On ErrSegmentExists (another
// writer got there first) the writer is closed; on any other error nothing
// changed and Checkpoint may be retried. A checkpoint with no new events is
// allowed (it records a state change).
func (w *Writer) Checkpoint(ctx context.Context, state State) (SegmentInfo, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed != nil {
		return SegmentInfo{}, w.closed
	}
	now := w.cfg.Now()
	if err := w.flushDelta(now); err != nil {
		return SegmentInfo{}, err
	}
	key := blobkey.Segment(w.threadID, w.segment)
	hc := cloneHash(w.h)
	hc.Write(w.buf.Bytes())
	cp := Checkpoint{Segment: w.segment, Events: w.events, DroppedDeltaBytes: w.deltaDropped,
		SHA256: hex.EncodeToString(hc.Sum(nil)), State: state, Artifacts: w.attest}
	line, err := signCheckpoint(now.UTC(), w.threadID, w.seq, cp, w.signer)
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
		// Our own earlier attempt (an SDK retry whose first response was
		// lost) left exactly these bytes: that is success.
		if got, gerr := w.store.Get(ctx, key); gerr != nil || !bytes.Equal(got, data) {
			w.closed = fmt.Errorf("checkpoint %s: %w", key, ErrSegmentExists)
			return SegmentInfo{}, w.closed
		}
	}
	hc.Write(line)
	hc.Write([]byte{'\n'})
	info := SegmentInfo{Key: key, Number: w.segment, FirstSeq: w.seq - int64(w.events), LastSeq: w.seq,
		Size: len(data), ChainHash: hex.EncodeToString(hc.Sum(nil)), KeyID: w.signer.KeyID(), Time: now.UTC(), Artifacts: w.attest}
	w.attest = nil
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

// LastState is the state of the last committed checkpoint (nil if none).
func (w *Writer) LastState() *State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastState
}

// Close discards uncommitted events and refuses further writes. Call
// Checkpoint first to keep them.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed == nil {
		w.closed = ErrWriterClosed
	}
	return nil
}
