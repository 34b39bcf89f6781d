// Package transcript records what a thread did as a signed, append-only
// event log in the blob store, and reads it back verified.
//
// Layout in the blob store (one thread; package blobkey builds the keys):
//
//	threads/<id>/transcript/00000001.jsonl   segment 1: events ... checkpoint
//	threads/<id>/transcript/00000002.jsonl   segment 2: events ... checkpoint
//	threads/<id>/thread.json                 JSON, attested by a checkpoint, or RFC 8785 JSON + _signature (SignJSON)
//	threads/<id>/capabilities.md             Markdown, attested by a checkpoint, or signed (<!-- rye:signed:... -->)
//	knowledge/agent/threads/<directive>/<id>.md   knowledge render (signed, made on read)
//
// S3 objects cannot be appended to, so a transcript is a sequence of
// immutable segments, one per checkpoint (turn boundary), each written
// create-only (blobstore.PutIfAbsent / If-None-Match: *). A worker that lost
// its lease and tries to write a segment another worker already wrote gets
// ErrSegmentExists and must stop: history is never overwritten.
//
// Every segment ends with exactly one checkpoint event. Its payload holds
//
//   - sha256: the SHA-256 of every transcript byte before the checkpoint
//     line: all earlier segments in full plus this segment's earlier lines.
//     It chains segments: reordering, removing or editing any earlier byte
//     changes it;
//   - state: the operational state snapshot a new worker resumes from
//     (iteration, cost counters, per-tool call counts, running summary,
//     an opaque extra map for the worker);
//   - artifacts: the SHA-256 of each file written beside the transcript
//     with this turn (thread.json, capabilities.md), by name: such a file
//     needs no signature of its own, a reader finds it attested by a
//     verified checkpoint (Writer.Attest, Transcript.Attested). Checkpoints
//     from before attestation have none, and read as before;
//   - key_id, algo and sig: an Ed25519 signature, by the key key_id names,
//     over the whole checkpoint line as written with an empty sig value
//     (prefixed by a domain string). The line contains the hash, the
//     state, the artifacts and the envelope (thread id, seq, timestamp), so
//     the signature covers all of them; nothing is re-serialised to
//     verify, the check is on bytes.
//
// Checkpoints therefore live inside the segments, not in a separate object:
// one PutIfAbsent commits the turn's events and the state atomically, which
// is what makes a checkpoint cost one object write. Clean with Transcript
// removes them together.
//
// Verification (Read) lists the segments, requires them numbered 1..N with
// no gap, every line a JSON event of this thread with seq = previous+1, and
// every checkpoint's segment number, event count, hash and signature to
// match. Strict mode fails on the first mismatch with a *VerifyError naming
// the segment key and line; lenient mode keeps the segments before the first
// bad one (the intact prefix up to the last good checkpoint) and reports the
// rest in Transcript.Warnings.
//
// Nothing a transcript holds can reveal that its last segments were
// deleted: what is left is a valid shorter transcript. Marks close that
// gap. A Mark (segment count and the chain hash of that segment) is kept
// outside the transcript, in the thread's registry record and in its
// signed thread.json; ReadOptions.Marks and OpenWriter hold a transcript
// to them: fewer segments than a mark is a *VerifyError naming the first
// missing segment, and a segment whose chain hash differs from a mark's is
// one naming that segment. A mark is a lower bound: segments after it are
// fine, which is what lets the registry record, at a checkpoint's commit,
// only what was durable before it (see package worker, Crash safety).
//
// Keys are Ed25519. A Keyring holds every trusted public key by key id (the
// first 16 hex digits of the SHA-256 of the key's PKIX PEM, as the reference
// system computes it), so a key can rotate: old segments keep verifying with
// the old public key while new ones are signed with the new private key.
//
// Token deltas are the one droppable event: AppendDelta coalesces them, emits
// at most one token_delta event per interval or chunk, and drops text beyond
// a per-segment budget. Every other event is buffered until the checkpoint
// that commits it and never dropped.
package transcript
