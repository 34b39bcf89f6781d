package transcript

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spool-run/spool/queue"
)

// jsonText is a Go value whose MarshalJSON returns the text as is: through
// it SignJSON takes the json.Marshal path with input that json.Marshal
// validates but does not deduplicate, nested or at the top.
type jsonText []byte

func (t jsonText) MarshalJSON() ([]byte, error) { return t, nil }

var (
	agreeSignerOnce sync.Once
	agreeSigner     *Signer
)

// fixedSigner is one key for every agreement check: Ed25519 signatures are
// deterministic, so equal canonical bytes give equal signed bytes.
func fixedSigner() *Signer {
	agreeSignerOnce.Do(func() {
		seed := make([]byte, ed25519.SeedSize)
		for i := range seed {
			seed[i] = byte(i)
		}
		agreeSigner = NewSigner(ed25519.NewKeyFromSeed(seed))
	})
	return agreeSigner
}

// checkAgrees holds SignJSON, VerifyJSON and the canonicalizer to the
// reference implementation on data: the same bytes, or an error from both.
func checkAgrees(t *testing.T, data []byte) {
	t.Helper()
	s := fixedSigner()
	ring := NewKeyring(s.PublicKey())
	for _, in := range []struct {
		name     string
		old, new any
	}{
		{"RawMessage", json.RawMessage(data), json.RawMessage(data)},
		{"Marshaler", jsonText(data), jsonText(data)},
		{"[]byte", data, data},
	} {
		want, werr := signJSONRef(in.old, s)
		got, gerr := signJSONLegacyFast(in.new, s)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
			t.Fatalf("signJSONLegacyFast(%s(%q)):\n got %q, %v\nwant %q, %v", in.name, data, got, gerr, want, werr)
		}
		if gerr == nil {
			checkVerifyAgrees(t, ring, got)
		}
	}
	checkVerifyAgrees(t, ring, data)

	// The canonicalizer itself, both ways of treating a repeated name.
	for _, reject := range []bool{true, false} {
		var obj map[string]any
		var werr error
		if reject {
			obj, werr = decodeObject(data)
		} else if !json.Valid(data) { // json.Marshal checks the syntax first
			werr = errNotObject
		} else {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if werr = dec.Decode(&obj); werr == nil && obj == nil {
				werr = errNotObject
			}
		}
		var want, wantSig []byte
		rawSig, hasSig := obj[SignatureField]
		if werr == nil {
			delete(obj, SignatureField)
			want, _ = canonicalJSON(obj)
			if hasSig {
				wantSig, _ = canonicalJSON(rawSig)
			}
		}
		c := getCanonicalizer()
		got, gerr := c.canonical([]byte("prefix"), data, reject)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("canonical(%q, reject=%v): error %v, want %v", data, reject, gerr, werr)
		}
		if werr == nil {
			if !bytes.Equal(got[len("prefix"):], want) || c.hasSig != hasSig || !bytes.Equal(c.sig, wantSig) {
				t.Fatalf("canonical(%q, reject=%v):\n got %q (signature %v %q)\nwant %q (signature %v %q)",
					data, reject, got[len("prefix"):], c.hasSig, c.sig, want, hasSig, wantSig)
			}
		}
		c.release()
	}
}

func checkVerifyAgrees(t *testing.T, ring *Keyring, data []byte) {
	t.Helper()
	var wantV, gotV any
	wantSig, werr := verifyJSONRef(data, ring, &wantV)
	gotSig, gerr := VerifyJSON(data, ring, &gotV)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("VerifyJSON(%q): error %v, want %v", data, gerr, werr)
	}
	if diff := cmp.Diff(wantSig, gotSig); diff != "" {
		t.Fatalf("VerifyJSON(%q) signature (-want +got):\n%s", data, diff)
	}
	if !reflect.DeepEqual(wantV, gotV) { // cmp is slow on deep values
		t.Fatalf("VerifyJSON(%q) value (-want +got):\n%s", data, cmp.Diff(wantV, gotV))
	}
}

var canonicalSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a":{"x":1,"x":2}}`,
	`{"a":1,"\u0061":2}`, `{"_signature":1}`, `{"_signature":{"algo":"ed25519","key_id":"k","sig":"s"},"a":1}`,
	`{"A":1,"_signature":2,"b":3}`, `{"_signature":1,"_signature":2}`, `{"x":{"_signature":1}}`,
	`{"n":[1.50,-0,1E+10,1e-7,12345678901234567890123456789,0.000001,-1.0e400]}`,
	`{"s":"<&>\u003c\u0026\u2028\u2029` + "\u2028\u2029" + `"}`,
	`{"s":"\b\f\n\r\t\u0000\u001f\u007f\"\\\/"}`, `{"s":"\ud83d\ude00\ud800\udc00\ud800\ud800\udc00\udc00x"}`,
	"{\"s\":\"\xff\xfe\xed\xa0\x80\xef\xbf\xbd\"}", "{\"\xff\":1,\"\xfe\":2}", "{\"\xff\":1,\"\\ufffd\":2}",
	`{"é":1,"\u00e9":2}`, `{"z":[],"y":{},"x":[{}],"w":[[[]]]}`, `{"t":true,"f":false,"n":null}`,
	`{"a":1} `, `{"a":1} {}`, `{"a":1}]`, `[{"a":1}]`, `null`, `"s"`, `1`, ``, ` `,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`,
	"{\"a\":\"\x01\"}", `{"a" 1}`, `{"a":1,}`, `{,}`, `{"a":[1,]}`, `{"a":[,1]}`, `{'a':1}`, `{"a":1`, `{"a":"`,
	"{\"a\":\"\\'\"}", "\xef\xbb\xbf{}", "{\"a\":1}\x00",
}

// FuzzCanonicalAgrees: SignJSON and VerifyJSON agree with the reference
// implementation (decode into a map, encode with encoding/json) on any
// input, byte for byte or both with an error.
//
//	go test -run '^$' -fuzz FuzzCanonicalAgrees ./transcript/
func FuzzCanonicalAgrees(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	data, _ := signJSONRef(sampleThreadJSON(), fixedSigner())
	f.Add(data)
	f.Fuzz(checkAgrees)
}

func TestCanonicalSeedsAgree(t *testing.T) {
	t.Parallel()
	for _, s := range canonicalSeeds {
		checkAgrees(t, []byte(s))
	}
}

// TestCanonicalAgreesRandom generates nested objects (repeated and
// escaped names, unicode, escapes, HTML characters, U+2028, invalid
// UTF-8, numbers as written, empty containers, random whitespace), some of
// them with a byte changed, and Go maps with names json.Marshal makes
// equal, and checks each against the reference.
func TestCanonicalAgreesRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() || raceEnabled {
		n = 300
	}
	s := fixedSigner()
	for i := 0; i < n; i++ {
		var b []byte
		b = genObject(rng, b, 0, true)
		checkAgrees(t, b)
		if len(b) > 0 {
			c := append([]byte(nil), b...)
			const junk = "{}[]\",:\\ 0e.-\xff"
			c[rng.IntN(len(c))] = junk[rng.IntN(len(junk))]
			checkAgrees(t, c)
		}
		v := genValue(rng, 0)
		want, werr := signJSONRef(v, s)
		got, gerr := signJSONLegacyFast(v, s)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
			t.Fatalf("signJSONLegacyFast(%#v):\n got %q, %v\nwant %q, %v", v, got, gerr, want, werr)
		}
	}
}

// TestSignJSONGoValuesAgree: Go values, the json.Marshaler ones included
// (their output is not compacted first), sign as the reference signs them.
func TestSignJSONGoValuesAgree(t *testing.T) {
	t.Parallel()
	s := fixedSigner()
	rec := benchRecord()
	dup := json.RawMessage(`{"a":1,"a":2,"b":{"c":1,"c":2}}`)
	var nilRec *queue.Record
	for _, v := range []any{rec, *rec, nilRec, sampleThreadJSON(), &dup, jsonText(nil), jsonText(" {\"b\" : 1 , \"a\":[ ]} "),
		map[string]any{"a\xff": 1, "a\xfe": 2, "b": map[string]any{"<": ">"}}, map[string]any{}, nil, 5, []any{}, &struct{ X int }{1}} {
		want, werr := signJSONRef(v, s)
		got, gerr := signJSONLegacyFast(v, s)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(want, got) {
			t.Fatalf("signJSONLegacyFast(%#v):\n got %q, %v\nwant %q, %v", v, got, gerr, want, werr)
		}
	}
}

// TestCanonicalDepth: encoding/json's nesting limit holds.
func TestCanonicalDepth(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		inner := depth - 1 // the top-level object is one level
		doc := `{"a":` + strings.Repeat("[", inner) + strings.Repeat("]", inner) + `}`
		checkAgrees(t, []byte(doc))
		doc = `{"a":` + strings.Repeat(`{"b":`, inner-1) + "{}" + strings.Repeat("}", inner-1) + `}`
		checkAgrees(t, []byte(doc))
	}
}

var (
	genNames = []string{"a", "b", "A", "_signature", "_sig", "_zeta", "0", "é", `\u00e9`, `\u0061`, "<&>",
		`\u2028`, "\u2028", "\xff", `\ufffd`, "\U0001F600", `\ud83d\ude00`, "key with space", `q\"uote`, ""}
	genStrings = []string{"", "plain", "<b>&amp;</b>", `\u003c\u0026\u003e`, "\u2028\u2029", `\u2028`,
		`line\nbreak\ttab\r`, `\b\f\u0000\u001f\u007f`, `\/slash`, `\\back`, `\"q\"`, "ünïcode ✓", "\U0001F600",
		`\ud83d\ude00`, `\ud800`, `\udc00\ud800`, `\ud800\ud800\udc00`, "\xff\xfe", "\xed\xa0\x80", "\xe2\x80", "\x7f", `\uFFFF\uFFFE`}
	genNumbers = []string{"0", "-0", "1", "-1", "1.50", "0.1", "1e3", "1E+3", "2.5e-7", "-0.0e-0",
		"12345678901234567890123456789012345678901234567890", "1e400", "-1e-400", "9007199254740993", "0.000001"}
	genSpace = []string{"", "", "", " ", "\n", "\t", "\r\n  "}
)

func genObject(rng *rand.Rand, b []byte, depth int, top bool) []byte {
	sp := func() { b = append(b, genSpace[rng.IntN(len(genSpace))]...) }
	b = append(b, '{')
	n := rng.IntN(6)
	if depth > 3 {
		n = rng.IntN(2)
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		sp()
		b = append(b, '"')
		b = append(b, genNames[rng.IntN(len(genNames))]...)
		if rng.IntN(4) == 0 {
			b = append(b, genNames[rng.IntN(len(genNames))]...)
		}
		b = append(b, '"')
		sp()
		b = append(b, ':')
		sp()
		b = genJSONValue(rng, b, depth+1)
		sp()
	}
	if n == 0 {
		sp()
	}
	b = append(b, '}')
	if top {
		sp()
	}
	return b
}

func genJSONValue(rng *rand.Rand, b []byte, depth int) []byte {
	k := rng.IntN(10)
	if depth > 4 && k >= 7 {
		k = rng.IntN(7)
	}
	switch k {
	case 0, 1:
		b = append(b, '"')
		for j := rng.IntN(4); j >= 0; j-- {
			b = append(b, genStrings[rng.IntN(len(genStrings))]...)
		}
		return append(b, '"')
	case 2, 3:
		return append(b, genNumbers[rng.IntN(len(genNumbers))]...)
	case 4:
		return append(b, "true"...)
	case 5:
		return append(b, "false"...)
	case 6:
		return append(b, "null"...)
	case 7:
		b = append(b, '[')
		for j := rng.IntN(4) - 1; j >= 0; j-- {
			b = append(b, genSpace[rng.IntN(len(genSpace))]...)
			b = genJSONValue(rng, b, depth+1)
			if j > 0 {
				b = append(b, ',')
			}
		}
		return append(b, ']')
	default:
		return genObject(rng, b, depth, false)
	}
}

// genValue makes a Go value for the json.Marshal path: maps whose keys
// json.Marshal may encode alike (invalid UTF-8 becomes U+FFFD), strings
// with what json.Marshal escapes, json.Number and jsonText values.
func genValue(rng *rand.Rand, depth int) any {
	k := rng.IntN(9)
	if depth == 0 {
		k = 8
	} else if depth > 3 && k >= 6 {
		k = rng.IntN(6)
	}
	str := func() string {
		var sb strings.Builder
		for j := rng.IntN(3); j >= 0; j-- {
			sb.WriteString([]string{"a", "<&>", "\u2028", "\xff", "\xfe", "\ufffd", "é", "\n\t\x01", `"\`, "_signature", "Z"}[rng.IntN(11)])
		}
		return sb.String()
	}
	switch k {
	case 0:
		return str()
	case 1:
		return json.Number(genNumbers[rng.IntN(len(genNumbers))])
	case 2:
		return rng.Float64() * 1e9
	case 3:
		return rng.IntN(2) == 0
	case 4:
		return nil
	case 5:
		return jsonText(genObject(rng, nil, 3, false))
	case 6, 7:
		a := make([]any, rng.IntN(4))
		for j := range a {
			a[j] = genValue(rng, depth+1)
		}
		return a
	default:
		m := map[string]any{}
		for j := rng.IntN(6); j > 0; j-- {
			m[str()] = genValue(rng, depth+1)
		}
		return m
	}
}
