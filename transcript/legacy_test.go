package transcript

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/registry"
)

// testdata/legacy holds objects signed by spool before RFC 8785 and
// checkpoint attestations (made by commit d77c2ef), with fixedSigner's key:
// thread.json of benchRecord and an object whose numbers and strings only
// the old canonicalization keeps as written (tricky.json), capabilities.md,
// and a two-segment transcript of benchEvents (thread t/legacy-1). They
// must keep verifying, and nothing about them may verify after a change.

var (
	fixedSignerOnce sync.Once
	fixedKey        *Signer
)

// fixedSigner is the key of testdata/legacy and of every check that wants
// the same bytes from the same input (Ed25519 signatures are
// deterministic).
func fixedSigner() *Signer {
	fixedSignerOnce.Do(func() {
		seed := make([]byte, ed25519.SeedSize)
		for i := range seed {
			seed[i] = byte(i)
		}
		fixedKey = NewSigner(ed25519.NewKeyFromSeed(seed))
	})
	return fixedKey
}

func legacyFixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "legacy", name))
	require.NoError(t, err)
	return data
}

func TestLegacyJSONVerifies(t *testing.T) {
	t.Parallel()
	ring := NewKeyring(fixedSigner().PublicKey())

	data := legacyFixture(t, "thread.json")
	var got registry.Record
	sig, err := VerifyJSON(data, ring, &got)
	require.NoError(t, err)
	require.Equal(t, CanonLegacy, sig.Canon)
	require.Equal(t, fixedSigner().KeyID(), sig.KeyID)
	want, err := json.Marshal(benchRecord())
	require.NoError(t, err)
	var wantRec registry.Record
	require.NoError(t, json.Unmarshal(want, &wantRec))
	// The fixture predates concurrency_keys (written [] for none): it
	// reads back as none ...
	require.Empty(t, wantRec.ConcurrencyKeys)
	wantRec.ConcurrencyKeys = nil
	// ... and tags ({} for none).
	require.Empty(t, wantRec.Tags)
	wantRec.Tags = nil
	if diff := cmp.Diff(wantRec, got); diff != "" {
		t.Fatalf("thread.json (-want +got):\n%s", diff)
	}

	tricky := legacyFixture(t, "tricky.json")
	var obj map[string]any
	_, err = VerifyJSON(tricky, ring, &obj)
	require.NoError(t, err)
	require.Contains(t, string(tricky), `"b":1.50`, "numbers as written: only the legacy canonicalization reads this")
	body, _, err := canonicalObject(tricky)
	require.NoError(t, err)
	require.NotContains(t, string(body), `1.50`)

	for name, bad := range map[string][]byte{
		"value changed":    bytes.Replace(data, []byte(`"turns":25`), []byte(`"turns":26`), 1),
		"number rewritten": bytes.Replace(tricky, []byte(`"b":1.50`), []byte(`"b":1.5`), 1),
		"duplicate key":    bytes.Replace(data, []byte(`{"_signature"`), []byte(`{"status":"error","_signature"`), 1),
		// A legacy signature read as RFC 8785's: the domain differs.
		"canon added":   bytes.Replace(data, []byte(`{"_signature":{"algo":"ed25519",`), []byte(`{"_signature":{"algo":"ed25519","canon":"`+CanonJCS+`",`), 1),
		"canon unknown": bytes.Replace(data, []byte(`{"_signature":{"algo":"ed25519",`), []byte(`{"_signature":{"algo":"ed25519","canon":"jcs-v9",`), 1),
	} {
		require.NotEqual(t, data, bad, name)
		if _, err := VerifyJSON(bad, ring, nil); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// TestJCSSignatureCanonBound: an RFC 8785 signature does not verify read
// as a legacy one (its canon id removed), nor under another id.
func TestJCSSignatureCanonBound(t *testing.T) {
	t.Parallel()
	s := fixedSigner()
	ring := NewKeyring(s.PublicKey())
	data, err := SignJSON(json.RawMessage(`{"a":"x","n":1}`), s)
	require.NoError(t, err)
	sig, err := VerifyJSON(data, ring, nil)
	require.NoError(t, err)
	require.Equal(t, CanonJCS, sig.Canon)
	for _, bad := range [][]byte{
		bytes.Replace(data, []byte(`"canon":"`+CanonJCS+`",`), nil, 1),
		bytes.Replace(data, []byte(`"canon":"`+CanonJCS+`"`), []byte(`"canon":"jcs-v2"`), 1),
		bytes.Replace(data, []byte(`"canon":"`+CanonJCS+`"`), []byte(`"canon":null`), 1),
	} {
		require.NotEqual(t, data, bad)
		_, err := VerifyJSON(bad, ring, nil)
		require.Error(t, err, "%s", bad)
	}
}

func TestLegacyCapabilitiesVerify(t *testing.T) {
	t.Parallel()
	f, err := ReadCapabilities(legacyFixture(t, "capabilities.md"), NewKeyring(fixedSigner().PublicKey()))
	require.NoError(t, err)
	require.True(t, f.For("t/legacy-1"))
	require.True(t, f.Lists(benchCapabilities))
	require.Len(t, f.Tools, len(benchToolDefs()))
	edited := strings.Replace(string(legacyFixture(t, "capabilities.md")), "fs_read", "fs_rm", 1)
	_, err = ReadCapabilities([]byte(edited), NewKeyring(fixedSigner().PublicKey()))
	require.ErrorIs(t, err, ErrBadSignature)
}

// legacyStore is the legacy transcript of t/legacy-1 in a memory store.
func legacyStore(t *testing.T) blobstore.Store {
	t.Helper()
	store := blobstore.NewMemory()
	for _, n := range []string{"00000001.jsonl", "00000002.jsonl"} {
		key := blobkey.Segments("t/legacy-1") + n
		require.NoError(t, store.Put(context.Background(), key, legacyFixture(t, key)))
	}
	return store
}

func TestLegacyTranscriptVerifies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ring := NewKeyring(fixedSigner().PublicKey())
	store := legacyStore(t)
	tr, err := Read(ctx, store, "t/legacy-1", ring, Strict)
	require.NoError(t, err)
	require.Len(t, tr.Segments, 2)
	require.Equal(t, ReasonRunFinished, tr.LastState.Reason)
	var types []string
	for _, ev := range tr.Events {
		types = append(types, ev.Type)
	}
	require.Equal(t, []string{TypeThreadStarted, TypeHookFired, TypeCognitionIn, TypeCheckpoint, TypeTokenDelta, TypeTokenDelta, TypeCognitionOut,
		TypeToolCallStart, TypeToolCallResult, TypeCognitionOut, TypeThreadCompleted, TypeCheckpoint}, types)

	// A writer continues it, and what it adds verifies with it.
	w, err := WriterConfig{Now: newClock().Now}.Open(ctx, store, "t/legacy-1", fixedSigner(), ring)
	require.NoError(t, err)
	_, err = w.Append(TypeCognitionIn, CognitionIn{Content: "more"})
	require.NoError(t, err)
	_, err = w.Checkpoint(ctx, State{Iteration: 3})
	require.NoError(t, err)
	tr, err = Read(ctx, store, "t/legacy-1", ring, Strict)
	require.NoError(t, err)
	require.Len(t, tr.Segments, 3)

	// Tampered, it does not.
	seg := blobkey.Segment("t/legacy-1", 2)
	data, err := store.Get(ctx, seg)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, seg, bytes.Replace(data, []byte("Found 12 leads"), []byte("Found 13 leads"), 1)))
	_, err = Read(ctx, store, "t/legacy-1", ring, Strict)
	require.ErrorIs(t, err, ErrTampered)
}

// TestSignJSONCanonical: SignJSON's output is the RFC 8785 encoding of the
// signed object, whichever side of "_signature" its names sort, and
// verifies; a _signature the input had is replaced.
func TestSignJSONCanonical(t *testing.T) {
	t.Parallel()
	s := fixedSigner()
	ring := NewKeyring(s.PublicKey())
	for _, v := range []any{
		map[string]any{"b": 1, "a": "x", "z": []any{1, "<&>"}},
		map[string]any{},
		map[string]any{"A": 1, "b": 2},               // "A" < "_signature"
		map[string]any{"0": 1},                       // digits too
		map[string]any{"_zeta": 1, "c": true},        // "_zeta" > "_signature"
		map[string]any{"\U0001F600": 1, "\uffff": 2}, // UTF-16 order differs from UTF-8's
		json.RawMessage(`{"k": 1.50, "j": "v", "_signature": {"old": true}}`),
		benchRecord(),
	} {
		out, err := SignJSON(v, s)
		require.NoError(t, err)
		canon, err := jcs.Transform(out)
		require.NoError(t, err)
		require.Equal(t, string(canon), string(out))
		require.NotContains(t, string(out), `"old"`)
		_, err = VerifyJSON(out, ring, nil)
		require.NoError(t, err, "%s", out)
	}
	for name, v := range map[string]any{
		"duplicate key":  json.RawMessage(`{"a":1,"b":{"c":1,"c":2}}`),
		"invalid UTF-8":  json.RawMessage("{\"a\":\"\xff\"}"),
		"lone surrogate": json.RawMessage(`{"a":"\ud800"}`),
		"out of range":   json.RawMessage(`{"a":1e400}`),
		"not an object":  []any{1},
		"null":           (*registry.Record)(nil),
		"trailing data":  json.RawMessage(`{"a":1} {}`),
	} {
		_, err := SignJSON(v, s)
		require.Error(t, err, name)
	}
	_, err := VerifyJSON([]byte(`{"a":1}`), ring, nil)
	require.ErrorContains(t, err, "no _signature field")
	_, err = VerifyJSON([]byte(`{"a":1}`), NewKeyring(), nil)
	require.False(t, errors.Is(err, ErrBadSignature))
}
