package transcript

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestSignJSONSplice: the signature spliced into the canonical encoding is
// byte for byte the canonical encoding of the object with the signature,
// whichever side of "_signature" the keys sort.
func TestSignJSONSplice(t *testing.T) {
	t.Parallel()
	s, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{
		map[string]any{"b": 1, "a": "x", "z": []any{1, "<&>"}},
		map[string]any{},
		map[string]any{"A": 1, "b": 2},        // "A" < "_signature"
		map[string]any{"0": 1},                // digits too
		map[string]any{"_zeta": 1, "c": true}, // "_zeta" > "_signature"
		json.RawMessage(`{"k": 1.50, "j": "v"}`),
	} {
		out, err := SignJSON(v, s)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeObject(out)
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		want, err := canonicalJSON(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want) {
			t.Errorf("%v:\n got %s\nwant %s", v, out, want)
		}
		if _, err := VerifyJSON(out, NewKeyring(s.PublicKey()), nil); err != nil {
			t.Errorf("%v: %v", v, err)
		}
	}
}
