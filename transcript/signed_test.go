package transcript

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

type threadJSON struct {
	ThreadID     string             `json:"thread_id"`
	Directive    string             `json:"directive"`
	Status       string             `json:"status"`
	Model        string             `json:"model"`
	Limits       thread.Resolved    `json:"limits"`
	Capabilities []string           `json:"capabilities"`
	Cost         thread.Cost        `json:"cost"`
	Outputs      map[string]string  `json:"outputs"`
	Extra        map[string]float64 `json:"extra"`
}

func sampleThreadJSON() threadJSON {
	return threadJSON{ThreadID: "agency-kiwi/discover_leads-1739820456", Directive: "agency-kiwi/discover_leads", Status: "completed",
		Model: "claude-3-5-haiku-20241022", Limits: thread.Resolved{Turns: 10, Tokens: 200000, Spend: 0.1},
		Capabilities: []string{"rye.execute.tool.scraping.gmaps.scrape_gmaps"},
		Cost:         thread.Cost{Turns: 4, InputTokens: 3200, OutputTokens: 800, Spend: 0.02},
		Outputs:      map[string]string{"leads_file": ".ai/data/leads.json", "html": "<b>&</b>"},
		Extra:        map[string]float64{"big": 12345678901234567, "small": 1e-9}}
}

func TestSignJSON(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	in := sampleThreadJSON()
	data, err := SignJSON(in, s.signer)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte(`{"_signature":{"algo":"ed25519","canon":"`+CanonJCS+`","key_id":"`+s.signer.KeyID())), "not canonical: %s", data)
	require.False(t, bytes.Contains(data, []byte("\n")), "not canonical: %s", data)
	require.True(t, bytes.Contains(data, []byte(`"outputs":{"html":"<b>&</b>","leads_file"`)), "not canonical: %s", data)
	var got threadJSON
	_, err = VerifyJSON(data, s.keyring, &got)
	require.NoError(t, err)
	if diff := cmp.Diff(in, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// Re-indented and re-ordered: same object, still verifies.
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, data, "", "  ")
	_, err = VerifyJSON(pretty.Bytes(), s.keyring, nil)
	require.NoError(t, err, "whitespace change rejected")
	// Re-signing is stable.
	again, _ := SignJSON(in, s.signer)
	require.Equal(t, data, again, "SignJSON not deterministic")
	cases := map[string][]byte{
		"value changed":    bytes.Replace(data, []byte(`"turns":10`), []byte(`"turns":99`), 1),
		"capability added": bytes.Replace(data, []byte(`"capabilities":["`), []byte(`"capabilities":["rye.execute.tool.*","`), 1),
		"duplicate key":    bytes.Replace(data, []byte(`{"_signature"`), []byte(`{"status":"error","_signature"`), 1),
		"no signature":     []byte(`{"a":1}`),
		"trailing data":    append(append([]byte(nil), data...), []byte(`{}`)...),
		"not an object":    []byte(`[1]`),
	}
	for name, c := range cases {
		if _, err := VerifyJSON(c, s.keyring, nil); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	_, err = VerifyJSON(data, NewKeyring(), nil)
	require.ErrorIs(t, err, ErrUnknownKey, "unknown key")
	// Property: a random byte flip either fails or leaves the same object.
	canon, _, err := canonicalObject(data)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 1000; i++ {
		b := append([]byte(nil), data...)
		b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		if _, err := VerifyJSON(b, s.keyring, nil); err == nil {
			c2, _, err := canonicalObject(b)
			require.NoError(t, err, "flip %d verified a different object: %s", i, b)
			require.Equal(t, canon, c2, "flip %d verified a different object: %s", i, b)
		}
	}
}

func TestSignedMarkdownAndCapabilities(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	now := time.Date(2026, 4, 1, 5, 6, 44, 0, time.UTC)
	tools := []thread.ToolDef{{Name: "rye/file-system/fs_write", Description: "write ``` a file", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	body, err := RenderCapabilities("t-1", tools, []string{"rye.execute.tool.rye.file-system.*", "rye.execute.tool.rye.agent.threads.thread_directive"})
	require.NoError(t, err)
	signed := SignMarkdown(body, s.signer, now)
	require.True(t, regexp.MustCompile(`^<!-- rye:signed:2026-04-01T05:06:44Z:[0-9a-f]{64}:[A-Za-z0-9_-]{86}:`+s.signer.KeyID()+" -->\n").Match(signed), "signature line: %s", signed[:bytes.IndexByte(signed, '\n')])
	got, err := VerifyCapabilities(signed, s.keyring)
	require.NoError(t, err)
	if diff := cmp.Diff(tools, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	require.True(t, bytes.Contains(body, []byte("  execute\n    tool\n")), "no capabilities tree:\n%s", body)
	// Re-signing replaces the line instead of stacking one.
	re := SignMarkdown(signed, s.signer, now)
	require.Equal(t, signed, re, "re-signing changed the file")
	tampered := bytes.Replace(signed, []byte("fs_write"), []byte("fs_wrote"), 1)
	_, err = VerifyCapabilities(tampered, s.keyring)
	require.ErrorIs(t, err, ErrBadSignature, "tampered capabilities")
	_, _, err = VerifyMarkdown(body, s.keyring)
	require.Error(t, err, "unsigned markdown verified")
	// The reference system's files parse (and their hash matches); only the
	// key is unknown to us.
	spec, err := os.ReadFile(filepath.Join("..", "..", "shared", "spec", "persistence-and-state.md"))
	if err == nil {
		_, _, err := VerifyMarkdown(spec, s.keyring)
		require.ErrorIs(t, err, ErrUnknownKey, "reference-signed spec")
	}
}

func TestRenderKnowledge(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeTranscript(t, s, 2)
	w := s.writer(t)
	mustAppend(t, w, TypeThreadCompleted, ThreadCompleted{Result: "done", Outputs: map[string]string{"k": "v"}})
	if _, err := w.Checkpoint(context.Background(), stateFor(2)); err != nil {
		t.Fatal(err)
	}
	tr := s.read(t, Strict)
	meta := KnowledgeMeta{ThreadID: s.threadID, Directive: "test/transcript", Status: "completed", Model: "scripted", Turns: 2, Spend: 0.002}
	md := RenderKnowledge(meta, tr.Events)
	for _, want := range []string{"entry_type: thread_transcript\n", `thread_id: "` + s.threadID + `"`, "turns: 2\n", "spend: 0.002\n",
		"capabilities_ref: ", "## Input — Turn 1", "### Response — Turn 2", "### Tool: rye/file-system/fs_write", "### Result: ", "## Completed\n\ndone", "- `k`: v"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("render lacks %q", want)
		}
	}
	require.Equal(t, RenderKnowledge(meta, tr.Events), md, "render not deterministic")
	signed := SignedKnowledge(meta, tr.Events, s.signer, time.Now())
	body, _, err := VerifyMarkdown(signed, s.keyring)
	require.NoError(t, err, "signed knowledge")
	require.Equal(t, md, body, "signed knowledge: %v", err)
}

func TestKeysSaveLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := GenerateKey()
	b, _ := GenerateKey()
	if _, _, err := a.SaveKey(dir); err != nil {
		t.Fatal(err)
	}
	privPath, pubPath, err := b.SaveKey(dir) // rotation: b replaces a as the signing key
	require.NoError(t, err)
	fi, _ := os.Stat(privPath)
	require.EqualValues(t, 0o600, fi.Mode().Perm(), "private key mode")
	require.Equal(t, b.KeyID()+".pub", filepath.Base(pubPath), "pub path %s, key id %q", pubPath, b.KeyID())
	require.Len(t, b.KeyID(), 16, "pub path %s, key id", pubPath)
	for _, p := range []string{dir, privPath} {
		got, err := LoadKey(p)
		require.NoError(t, err, "LoadKey(%s) = %v", p, got)
		require.Equal(t, b.KeyID(), got.KeyID(), "LoadKey(%s) = %v, %v", p, got, err)
	}
	ring, err := LoadKeyring(dir)
	require.NoError(t, err)
	if diff := cmp.Diff(sortedIDs(a.KeyID(), b.KeyID()), ring.IDs()); diff != "" {
		t.Fatalf("keyring (-want +got):\n%s", diff)
	}
	// Raw seed files load too; junk does not.
	seedPath := filepath.Join(dir, "seed")
	_ = os.WriteFile(seedPath, a.priv.Seed(), 0o600)
	got, err := LoadKey(seedPath)
	require.NoError(t, err, "raw seed")
	require.Equal(t, a.KeyID(), got.KeyID(), "raw seed: %v", err)
	_ = os.WriteFile(seedPath, []byte("junk"), 0o600)
	_, err = LoadKey(seedPath)
	require.Error(t, err, "junk key loaded")
	_, err = LoadKeyring(t.TempDir())
	require.Error(t, err, "empty keyring loaded")
	msg := []byte("m")
	require.NoError(t, ring.Verify(a.KeyID(), msg, a.Sign(msg)))
	err = ring.Verify(a.KeyID(), msg, b.Sign(msg))
	require.ErrorIs(t, err, ErrBadSignature, "wrong signer")
}

func sortedIDs(ids ...string) []string {
	if ids[0] > ids[1] {
		ids[0], ids[1] = ids[1], ids[0]
	}
	return ids
}
