package transcript

// The implementation of SignJSON and VerifyJSON before canonicaljson.go:
// decode into map[string]any, encode with encoding/json. Kept as the
// reference the canonicalizer must agree with byte for byte
// (FuzzCanonicalAgrees, TestCanonicalAgreesRandom) and as the "old" side
// of the benchmarks.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
)

// signJSONRef is the reference SignJSON: it encodes v (which must encode as
// a JSON object) as canonical JSON (keys sorted, no insignificant
// whitespace, numbers as written, no HTML escaping) with a _signature
// field: an Ed25519 signature over the canonical encoding of the object
// without _signature.
func signJSONRef(v any, signer *Signer) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	var obj map[string]any
	switch v.(type) {
	case json.RawMessage, []byte:
		// Bytes from outside: a duplicate key would sign one reading of
		// an ambiguous object.
		obj, err = decodeObject(raw)
	default:
		// Where json.Marshal repeats a key, the last one wins.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err = dec.Decode(&obj); err == nil && obj == nil {
			err = fmt.Errorf("not a JSON object")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	delete(obj, SignatureField)
	canon, err := canonicalJSON(obj)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	sig := map[string]any{"key_id": signer.KeyID(), "algo": algoEd25519,
		"sig": b64.EncodeToString(signer.Sign(append([]byte(jsonDomainLegacy), canon...)))}
	first := true // _signature sorts before every other key
	for k := range obj {
		if k < SignatureField {
			first = false
			break
		}
	}
	if !first {
		obj[SignatureField] = sig
		return canonicalJSON(obj)
	}
	// The canonical object with _signature is the one without it, with
	// the signature spliced in as the first member.
	sigJSON, err := canonicalJSON(sig)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	out := make([]byte, 0, len(canon)+len(sigJSON)+len(SignatureField)+4)
	out = append(out, `{"`+SignatureField+`":`...)
	out = append(out, sigJSON...)
	if len(obj) > 0 {
		out = append(out, ',')
	}
	return append(out, canon[1:]...), nil
}

// verifyJSONRef is the reference VerifyJSON: it checks data made by
// SignJSON against keyring and, when v is not nil, decodes the object
// (without _signature) into v.
func verifyJSONRef(data []byte, keyring *Keyring, v any) (JSONSignature, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return JSONSignature{}, fmt.Errorf("verify json: %w", err)
	}
	rawSig, ok := obj[SignatureField]
	if !ok {
		return JSONSignature{}, fmt.Errorf("verify json: no %s field", SignatureField)
	}
	delete(obj, SignatureField)
	sigJSON, _ := json.Marshal(rawSig)
	var sig JSONSignature
	if err := json.Unmarshal(sigJSON, &sig); err != nil {
		return JSONSignature{}, fmt.Errorf("verify json: %s: %w", SignatureField, err)
	}
	if sig.Algo != algoEd25519 {
		return sig, fmt.Errorf("verify json: algo %q, want ed25519", sig.Algo)
	}
	sigBytes, err := b64.DecodeString(sig.Sig)
	if err != nil {
		return sig, fmt.Errorf("verify json: signature encoding: %w", err)
	}
	canon, err := canonicalJSON(obj)
	if err != nil {
		return sig, fmt.Errorf("verify json: %w", err)
	}
	if err := keyring.Verify(sig.KeyID, append([]byte(jsonDomainLegacy), canon...), sigBytes); err != nil {
		return sig, fmt.Errorf("verify json: %w", err)
	}
	if v != nil {
		if err := json.Unmarshal(canon, v); err != nil {
			return sig, fmt.Errorf("verify json: decode: %w", err)
		}
	}
	return sig, nil
}

// decodeObject parses a JSON object keeping numbers as written. Trailing
// data and duplicate keys are rejected (a duplicate would let two readers
// see different values under one signature).
func decodeObject(data []byte) (map[string]any, error) {
	if err := rejectDuplicateKeys(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("trailing data after the JSON object")
	}
	return obj, nil
}

func rejectDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{obj: true, keys: map[string]bool{}, key: true})
				continue
			case '[':
				if top != nil && top.obj {
					top.key = true
				}
				stack = append(stack, &frame{})
				continue
			default:
				stack = stack[:len(stack)-1]
				continue
			}
		case string:
			if top != nil && top.obj && top.key {
				if top.keys[t] {
					return fmt.Errorf("duplicate key %q", t)
				}
				top.keys[t] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.obj {
			top.key = true
		}
	}
}

// canonicalJSON encodes v with sorted keys (encoding/json sorts map keys),
// no whitespace and no HTML escaping.
func canonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// signJSONLegacyFast is SignJSON as it was before RFC 8785: CanonLegacy
// from the byte-level canonicalizer (canonicaljson.go), for the
// agreement tests and the "before" side of the benchmarks.
func signJSONLegacyFast(v any, signer *Signer) ([]byte, error) {
	var raw []byte
	reject := false
	switch m := v.(type) {
	case json.RawMessage:
		// Bytes from outside: a duplicate key would sign one reading of
		// an ambiguous object. The canonicalizer checks the syntax.
		raw, reject = m, true
	case json.Marshaler:
		// json.Marshal would call MarshalJSON, then check and compact
		// its output: the canonicalizer does both, so it takes the
		// output as it is.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return nil, fmt.Errorf("sign json: %w", errNotObject) // json.Marshal writes null
		}
		var err error
		if raw, err = m.MarshalJSON(); err != nil {
			return nil, fmt.Errorf("sign json: %T.MarshalJSON: %w", v, err)
		}
	default:
		var err error
		if raw, err = marshal(v); err != nil {
			return nil, fmt.Errorf("sign json: %w", err)
		}
	}
	c := getCanonicalizer()
	defer c.release()
	// One buffer: the signed message (domain, canonical object), then the
	// output, the same object with the _signature member inserted in place.
	buf := make([]byte, 0, len(jsonDomainLegacy)+2*len(raw)+jsonSignatureMemberSize)
	buf = append(buf, jsonDomainLegacy...)
	buf, err := c.canonical(buf, raw, reject)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	sig := signer.Sign(buf)
	member := c.tmp[:0]
	if c.sigAfter {
		member = append(member, ',')
	}
	member = append(member, `"`+SignatureField+`":{"algo":`...)
	member = appendJSONString(member, algoEd25519, false)
	member = append(member, `,"key_id":`...)
	member = appendJSONString(member, signer.KeyID(), false)
	member = append(member, `,"sig":"`...)
	member = b64.AppendEncode(member, sig) // base64url: nothing to escape
	member = append(member, `"}`...)
	if !c.sigAfter && c.written > 0 {
		member = append(member, ',')
	}
	c.tmp = member
	return slices.Insert(buf, c.sigAt, member...)[len(jsonDomainLegacy):], nil
}

// jsonSignatureMemberSize is about the size of the _signature member.
const jsonSignatureMemberSize = 160
