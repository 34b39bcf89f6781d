package transcript

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"runtime"
	"sort"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// Mode is the verification mode (coordination.yaml transcript_integrity).
type Mode int

const (
	// Strict fails on the first mismatch with a *VerifyError.
	Strict Mode = iota
	// Lenient returns the intact prefix up to the last good checkpoint and
	// reports the rest in Transcript.Warnings.
	Lenient
)

// ParseMode parses "strict" or "lenient".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "strict", "":
		return Strict, nil
	case "lenient":
		return Lenient, nil
	}
	return Strict, fmt.Errorf("transcript integrity mode %q: want strict or lenient", s)
}

func (m Mode) String() string {
	if m == Lenient {
		return "lenient"
	}
	return "strict"
}

// SegmentInfo describes one verified segment.
type SegmentInfo struct {
	Key      string
	Number   int64
	FirstSeq int64 // seq of its first event
	LastSeq  int64 // seq of its checkpoint event
	Size     int
	// ChainHash is the hex SHA-256 of the whole transcript up to and
	// including this segment.
	ChainHash string
	KeyID     string
	Time      time.Time // the checkpoint's timestamp
	// Artifacts are what the checkpoint attests (Checkpoint.Artifacts).
	Artifacts map[string]string
}

// Transcript is a verified transcript.
type Transcript struct {
	ThreadID string
	Events   []Event // every verified event, checkpoints included, in seq order
	Segments []SegmentInfo
	// LastState is the state of the last verified checkpoint (nil if none).
	LastState *State
	// LastCheckpointSeq is the event seq of the last verified checkpoint.
	LastCheckpointSeq int64
	// Warnings lists what lenient mode skipped.
	Warnings []string
}

// LastSegment is the number of the last verified segment (0 if none).
func (t *Transcript) LastSegment() int64 {
	if len(t.Segments) == 0 {
		return 0
	}
	return t.Segments[len(t.Segments)-1].Number
}

// Attested returns the number of the last verified segment whose
// checkpoint attests data as artifact name (Writer.Attest), or 0 when none
// does. A file so attested is as verified as that checkpoint: its
// signature covers the file's SHA-256, and the hash chain covers the
// checkpoint.
func (t *Transcript) Attested(name string, data []byte) int64 {
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	for i := len(t.Segments) - 1; i >= 0; i-- {
		if t.Segments[i].Artifacts[name] == want {
			return t.Segments[i].Number
		}
	}
	return 0
}

// ReadOptions tune Read.
type ReadOptions struct {
	Mode Mode
	// MinSegments, when > 0, is the number of segments the caller knows were
	// committed. Fewer verified segments is a mismatch: this detects
	// deletion of the last segments, which no hash chain can. Default 0.
	// It is Marks with a mark without a hash.
	MinSegments int64
	// Marks are points the caller knows were durable (the registry's and
	// thread.json's transcript marks): the transcript must have at least
	// the highest mark's segments, and each mark's segment must end with
	// its chain hash. A mismatch is a *VerifyError naming the first
	// missing segment, or the segment whose chain hash differs. Lenient
	// mode reports it in Warnings and keeps what verified; a missing
	// segment is not reported again when an earlier damaged segment
	// already was.
	Marks []Mark
	// Concurrency is how many segments are fetched at once. Default 8.
	Concurrency int
}

// Read lists, fetches, verifies and concatenates a thread's transcript. A
// thread with no segments yields an empty transcript. Store errors other
// than a segment vanishing are returned as they are in both modes.
func Read(ctx context.Context, store blobstore.Store, threadID string, keyring *Keyring, mode Mode) (*Transcript, error) {
	return ReadWith(ctx, store, threadID, keyring, ReadOptions{Mode: mode})
}

// ReadWith is Read with options.
func ReadWith(ctx context.Context, store blobstore.Store, threadID string, keyring *Keyring, opts ReadOptions) (*Transcript, error) {
	tr, _, err := read(ctx, store, threadID, keyring, opts)
	return tr, err
}

func read(ctx context.Context, store blobstore.Store, threadID string, keyring *Keyring, opts ReadOptions) (*Transcript, *verifier, error) {
	tr := &Transcript{ThreadID: threadID}
	sum, v, err := walk(ctx, store, threadID, keyring, opts, func(seg SegmentInfo, evs []Event) error {
		tr.Events = append(tr.Events, evs...)
		tr.Segments = append(tr.Segments, seg)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	tr.Warnings, tr.LastState, tr.LastCheckpointSeq = sum.Warnings, sum.LastState, sum.LastCheckpointSeq
	return tr, v, nil
}

// walk lists, fetches and verifies a thread's segments in order and hands
// each verified one to visit; it keeps none of them itself, and fetches at
// most opts.Concurrency segments ahead of visit. The marks are checked as
// the segments pass (the chain hash of each segment a mark names) and
// against the count at the end.
func walk(ctx context.Context, store blobstore.Store, threadID string, keyring *Keyring, opts ReadOptions,
	visit func(SegmentInfo, []Event) error) (*WalkSummary, *verifier, error) {
	if err := validateThreadID(threadID); err != nil {
		return nil, nil, err
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = max(8, runtime.GOMAXPROCS(0))
	}
	v := newVerifier(threadID, keyring)
	sum := &WalkSummary{ThreadID: threadID}
	keys, err := segmentKeys(ctx, store, v, opts.Mode, sum)
	if err != nil {
		return nil, nil, err
	}
	marks, marked := markedSegments(opts)
	stopped, err := walkSegments(ctx, store, keys, v, opts, sum, marked, visit)
	if err != nil {
		return nil, nil, err
	}
	if err := sum.holdToMarks(marks, marked, stopped, opts.Mode); err != nil {
		return nil, nil, err
	}
	sum.LastState, sum.LastCheckpointSeq = v.lastState, v.lastCkSeq
	return sum, v, nil
}

// segmentKeys are the keys of the thread's segments, in order. An object
// under the segments' prefix that is no segment fails strict mode, and is
// a warning of sum in lenient mode.
func segmentKeys(ctx context.Context, store blobstore.Store, v *verifier, mode Mode, sum *WalkSummary) ([]string, error) {
	infos, err := store.List(ctx, v.prefix)
	if err != nil {
		return nil, fmt.Errorf("read transcript %s: %w", v.threadID, err)
	}
	var keys []string
	for _, in := range infos {
		if _, ok := blobkey.ParseSegment(v.threadID, in.Key); ok {
			keys = append(keys, in.Key)
			continue
		}
		verr := &VerifyError{Key: in.Key, Reason: "unexpected object among segments"}
		if mode == Strict {
			return nil, verr
		}
		sum.Warnings = append(sum.Warnings, verr.Error())
	}
	sort.Strings(keys) // zero-padded: lexical = numeric
	return keys, nil
}

// markedSegments are the marks the walk holds the transcript to (opts's,
// and a mark of opts.MinSegments segments when set) and the segments
// whose chain hash a mark names, their hashes to be filled in as the
// segments pass.
func markedSegments(opts ReadOptions) ([]Mark, map[int64]string) {
	marks := opts.Marks
	if opts.MinSegments > 0 {
		marks = append(marks[:len(marks):len(marks)], Mark{Segments: opts.MinSegments})
	}
	marked := map[int64]string{}
	for _, m := range marks {
		if m.Segments > 0 && m.ChainHash != "" {
			marked[m.Segments] = ""
		}
	}
	return marks, marked
}

// walkSegments fetches and verifies keys in order, counts each verified
// segment in sum, notes the chain hash of each one marked names, and hands
// it to visit. At the first segment that vanished or fails verification,
// strict mode fails, and lenient mode stops with a warning and says so
// (stopped).
func walkSegments(ctx context.Context, store blobstore.Store, keys []string, v *verifier, opts ReadOptions, sum *WalkSummary,
	marked map[int64]string, visit func(SegmentInfo, []Event) error) (stopped bool, err error) {
	fetch := prefetch(ctx, store, keys, opts.Concurrency, v)
	defer fetch.stop()
	for i, key := range keys {
		evs, seg, bad, err := nextSegment(fetch, v, i, key)
		if err != nil {
			return false, err
		}
		if bad != nil {
			if opts.Mode == Strict {
				return false, bad
			}
			sum.Warnings = append(sum.Warnings, bad.Error())
			if rest := len(keys) - i - 1; rest > 0 {
				sum.Warnings = append(sum.Warnings, fmt.Sprintf("transcript %s: %d later segment(s) ignored after the first bad one", v.threadID, rest))
			}
			return true, nil
		}
		if _, ok := marked[seg.Number]; ok {
			marked[seg.Number] = seg.ChainHash
		}
		sum.Segments, sum.Events, sum.ChainHash = seg.Number, sum.Events+int64(len(evs)), seg.ChainHash
		if err := visit(seg, evs); err != nil {
			return false, err
		}
	}
	return false, nil
}

// nextSegment is segment i of the walk (key), fetched and verified: bad
// when it vanished between list and get or fails verification, err when
// the store failed otherwise.
func nextSegment(fetch *prefetcher, v *verifier, i int, key string) (evs []Event, seg SegmentInfo, bad, err error) {
	parsed, err := fetch.get(i)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, SegmentInfo{}, &VerifyError{Key: key, Reason: "segment vanished between list and get"}, nil
	}
	if err != nil {
		return nil, SegmentInfo{}, nil, fmt.Errorf("read transcript %s: %w", v.threadID, err)
	}
	evs, seg, bad = v.chain(parsed)
	return evs, seg, bad, nil
}

// holdToMarks holds the walked transcript to marks, marked holding the
// chain hashes of the segments they name: a mismatch fails strict mode
// and is a warning of lenient mode, but for the missing segment a lenient
// walk stopped at, which is reported already.
func (sum *WalkSummary) holdToMarks(marks []Mark, marked map[int64]string, stopped bool, mode Mode) error {
	for _, verr := range checkMarks(sum.ThreadID, sum.Segments, func(n int64) string { return marked[n] }, marks) {
		if mode == Strict {
			return verr
		}
		if stopped && verr.Key == blobkey.Segment(sum.ThreadID, sum.Segments+1) {
			continue
		}
		sum.Warnings = append(sum.Warnings, verr.Error())
	}
	return nil
}

// prefetcher fetches keys with bounded concurrency, in any order; get(i)
// waits for key i. At most conc segments are fetched or waiting to be
// read at any time: a slot frees when get hands its segment over, so a
// slow reader holds the fetching back and memory stays bounded whatever
// the transcript's length.
type prefetcher struct {
	res    []chan fetched
	slots  chan struct{}
	cancel context.CancelFunc
	ctx    context.Context
}

type fetched struct {
	seg *parsedSegment
	err error
}

// prefetch fetches and parses (parseSegment) keys with bounded concurrency.
func prefetch(ctx context.Context, store blobstore.Store, keys []string, conc int, v *verifier) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{res: make([]chan fetched, len(keys)), slots: make(chan struct{}, conc), cancel: cancel, ctx: ctx}
	for i := range p.res {
		p.res[i] = make(chan fetched, 1)
	}
	go func() {
		for i, k := range keys {
			select {
			case p.slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				d, err := store.Get(ctx, k)
				if err != nil {
					p.res[i] <- fetched{err: err}
					return
				}
				p.res[i] <- fetched{seg: parseSegment(v.threadID, k, d, v.keyring)}
			}()
		}
	}()
	return p
}

func (p *prefetcher) get(i int) (*parsedSegment, error) {
	select {
	case r := <-p.res[i]:
		<-p.slots
		return r.seg, r.err
	case <-p.ctx.Done():
		return nil, p.ctx.Err()
	}
}

func (p *prefetcher) stop() { p.cancel() }

// verifier checks segments in order and carries the chain between them.
type verifier struct {
	threadID    string
	prefix      string
	keyring     *Keyring
	h           hash.Hash // over every verified byte
	nextSegment int64
	nextSeq     int64
	lastState   *State
	lastCkSeq   int64
}

func newVerifier(threadID string, keyring *Keyring) *verifier {
	return &verifier{threadID: threadID, prefix: blobkey.Segments(threadID), keyring: keyring, h: sha256.New(), nextSegment: 1, nextSeq: 1}
}

func cloneHash(h hash.Hash) hash.Hash {
	if c, ok := h.(hash.Cloner); ok {
		if hc, err := c.Clone(); err == nil {
			return hc.(hash.Hash)
		}
	}
	// Fallback through the marshalled state every std hash supports.
	st, err := h.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
	if err != nil {
		panic(err)
	}
	nh := sha256.New()
	if err := nh.(interface{ UnmarshalBinary([]byte) error }).UnmarshalBinary(st); err != nil {
		panic(err)
	}
	return nh
}

// parsedSegment is the chain-independent half of verifying a segment:
// its events decoded and its checkpoint's signature checked. It is computed
// in the fetch goroutines, in parallel; segment() then checks the chain.
type parsedSegment struct {
	key     string
	n       int64
	data    []byte
	events  []Event // decoded events, checkpoint last (up to errLine)
	cp      *Checkpoint
	cpStart int          // offset of the checkpoint line
	err     *VerifyError // first parse failure, if any
}

// parseSegment decodes a segment without the chain: JSON shape, thread id,
// one checkpoint at the end and its signature.
func parseSegment(threadID, key string, data []byte, keyring *Keyring) *parsedSegment {
	p := &parsedSegment{key: key, data: data}
	n, ok := blobkey.ParseSegment(threadID, key)
	if !ok {
		p.err = &VerifyError{Key: key, Reason: "not a segment key"}
		return p
	}
	p.n = n
	if len(data) == 0 || data[len(data)-1] != '\n' {
		p.err = &VerifyError{Key: key, Reason: "segment is empty or does not end with a newline"}
		return p
	}
	p.events = make([]Event, 0, bytes.Count(data, []byte{'\n'}))
	for start, lineNo := 0, 1; start < len(data); lineNo++ {
		end := start + bytes.IndexByte(data[start:], '\n')
		line := data[start:end]
		fail := func(reason string, err error) *parsedSegment {
			p.err = &VerifyError{Key: key, Line: lineNo, Reason: reason, Err: err}
			return p
		}
		if len(line) == 0 {
			return fail("empty line", nil)
		}
		var ev Event
		if err := decodeLine(line, &ev); err != nil {
			return fail("not a JSON event", err)
		}
		switch {
		case ev.ThreadID != threadID:
			return fail(fmt.Sprintf("thread_id %q, want %q", ev.ThreadID, threadID), nil)
		case ev.Type == "":
			return fail("event_type is empty", nil)
		}
		last := end+1 == len(data)
		if ev.Type != TypeCheckpoint {
			if last {
				return fail("segment does not end with a checkpoint", nil)
			}
			p.events = append(p.events, ev)
			start = end + 1
			continue
		}
		if !last {
			return fail("checkpoint before the end of the segment", nil)
		}
		cp, reason, err := verifyCheckpoint(line, &ev, keyring)
		if reason != "" {
			return fail(reason, err)
		}
		p.events = append(p.events, ev)
		p.cp, p.cpStart = cp, start
		start = end + 1
	}
	return p
}

// segment verifies one segment; on success it advances the chain, on
// failure it leaves the verifier unchanged.
func (v *verifier) segment(key string, data []byte) ([]Event, SegmentInfo, error) {
	return v.chain(parseSegment(v.threadID, key, data, v.keyring))
}

// chain checks a parsed segment against the chain so far: segment number,
// seq continuity, the checkpoint's hash, segment and event count.
func (v *verifier) chain(p *parsedSegment) ([]Event, SegmentInfo, error) {
	if p.n != 0 && p.n != v.nextSegment {
		return nil, SegmentInfo{}, &VerifyError{Key: blobkey.Segment(v.threadID, v.nextSegment),
			Reason: fmt.Sprintf("missing segment (next present is %d)", p.n)}
	}
	// Seq mismatches on lines before a parse failure come first.
	for i, ev := range p.events {
		if want := v.nextSeq + int64(i); ev.Seq != want {
			return nil, SegmentInfo{}, &VerifyError{Key: p.key, Line: i + 1, Reason: fmt.Sprintf("seq %d, want %d", ev.Seq, want)}
		}
	}
	if p.err != nil {
		return nil, SegmentInfo{}, p.err
	}
	cp, line := p.cp, len(p.events)
	fail := func(reason string) ([]Event, SegmentInfo, error) {
		return nil, SegmentInfo{}, &VerifyError{Key: p.key, Line: line, Reason: reason}
	}
	hc := cloneHash(v.h)
	hc.Write(p.data[:p.cpStart])
	if want := hex.EncodeToString(hc.Sum(nil)); cp.SHA256 != want {
		return fail("checkpoint hash does not match the preceding bytes")
	}
	if cp.Segment != p.n {
		return fail(fmt.Sprintf("checkpoint names segment %d", cp.Segment))
	}
	if cp.Events != len(p.events)-1 {
		return fail(fmt.Sprintf("checkpoint counts %d events, segment has %d", cp.Events, len(p.events)-1))
	}
	hc.Write(p.data[p.cpStart:])
	ck := p.events[len(p.events)-1]
	info := SegmentInfo{Key: p.key, Number: p.n, FirstSeq: v.nextSeq, LastSeq: ck.Seq, Size: len(p.data),
		ChainHash: hex.EncodeToString(hc.Sum(nil)), KeyID: cp.KeyID, Time: ck.Timestamp, Artifacts: cp.Artifacts}
	st := cp.State
	v.h = hc
	v.nextSegment = p.n + 1
	v.nextSeq = ck.Seq + 1
	v.lastState = &st
	v.lastCkSeq = ck.Seq
	return p.events, info, nil
}
