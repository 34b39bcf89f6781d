package transcript

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
)

// SignatureField is the field SignJSON adds to the signed object.
const SignatureField = "_signature"

// jsonDomain separates signed-JSON signatures from other uses of a key.
const jsonDomain = "spool-signed-json-v1\n"

// JSONSignature is the value of the _signature field.
type JSONSignature struct {
	KeyID string `json:"key_id"`
	Sig   string `json:"sig"`  // base64url, no padding
	Algo  string `json:"algo"` // "ed25519"
}

// SignJSON encodes v (which must encode as a JSON object) as canonical JSON
// (keys sorted, no insignificant whitespace, numbers as written, no HTML
// escaping) with a _signature field: an Ed25519 signature over the canonical
// encoding of the object without _signature. Used for thread.json.
//
// A json.RawMessage is taken as JSON text, and a name repeated in any of
// its objects is an error; a name json.Marshal repeats (a MarshalJSON that
// does, map keys that encode alike) keeps its last value. A []byte is
// marshalled like any Go value, to a base64 string, so it is not an object.
// The canonical encoding is made from the JSON text directly
// (canonicaljson.go), not through a decoded map.
func SignJSON(v any, signer *Signer) ([]byte, error) {
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
	buf := make([]byte, 0, len(jsonDomain)+2*len(raw)+jsonSignatureMemberSize)
	buf = append(buf, jsonDomain...)
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
	return slices.Insert(buf, c.sigAt, member...)[len(jsonDomain):], nil
}

// jsonSignatureMemberSize is about the size of the _signature member.
const jsonSignatureMemberSize = 160

// VerifyJSON checks data made by SignJSON against keyring and, when v is
// not nil, decodes the object (without _signature) into v. Whitespace and
// key order may have changed since signing; any change of a name or value
// fails, as does a name repeated in any object, or data after the object.
func VerifyJSON(data []byte, keyring *Keyring, v any) (JSONSignature, error) {
	c := getCanonicalizer()
	defer c.release()
	msg := make([]byte, 0, len(jsonDomain)+2*len(data))
	msg = append(msg, jsonDomain...)
	msg, err := c.canonical(msg, data, true)
	if err != nil {
		return JSONSignature{}, fmt.Errorf("verify json: %w", err)
	}
	if !c.hasSig {
		return JSONSignature{}, fmt.Errorf("verify json: no %s field", SignatureField)
	}
	var sig JSONSignature
	if err := json.Unmarshal(c.sig, &sig); err != nil {
		return JSONSignature{}, fmt.Errorf("verify json: %s: %w", SignatureField, err)
	}
	if sig.Algo != algoEd25519 {
		return sig, fmt.Errorf("verify json: algo %q, want ed25519", sig.Algo)
	}
	sigBytes, err := b64.DecodeString(sig.Sig)
	if err != nil {
		return sig, fmt.Errorf("verify json: signature encoding: %w", err)
	}
	if err := keyring.Verify(sig.KeyID, msg, sigBytes); err != nil {
		return sig, fmt.Errorf("verify json: %w", err)
	}
	if v != nil {
		if err := json.Unmarshal(msg[len(jsonDomain):], v); err != nil {
			return sig, fmt.Errorf("verify json: decode: %w", err)
		}
	}
	return sig, nil
}
