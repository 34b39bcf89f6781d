package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/gowebpki/jcs"
)

// SignatureField is the field SignJSON adds to the signed object.
const SignatureField = "_signature"

// Canonicalizations: how the bytes a JSON signature covers are made from
// the object (JSONSignature.Canon). The id is in the signature and in the
// domain string the signed bytes start with, so a signature made under
// one cannot be read under another.
const (
	// CanonJCS is RFC 8785, the JSON Canonicalization Scheme
	// (github.com/gowebpki/jcs), version 1 of its use here: what
	// SignJSON signs. Numbers are IEEE 754 doubles written as ECMAScript
	// writes them (an integer beyond 2^53 is rounded, as I-JSON allows),
	// strings must be valid UTF-8, a repeated name is an error.
	CanonJCS = "jcs-v1"
	// CanonLegacy is the canonicalization of objects signed before
	// RFC 8785, whose signature carries no canon id: the object decoded
	// into map[string]any (numbers as written) and encoded again by
	// encoding/json without HTML escaping (legacyjson.go). VerifyJSON
	// still reads them; nothing signs them any more.
	CanonLegacy = ""
)

// The domain strings signed bytes start with, one per canonicalization:
// they separate signed-JSON signatures from other uses of a key, and one
// canonicalization from another.
const (
	jsonDomainJCS    = "spool-signed-json-" + CanonJCS + "\n"
	jsonDomainLegacy = "spool-signed-json-v1\n"
)

// JSONSignature is the value of the _signature field.
type JSONSignature struct {
	Algo  string `json:"algo"` // "ed25519"
	Canon string `json:"canon,omitempty"`
	KeyID string `json:"key_id"`
	Sig   string `json:"sig"` // base64url, no padding
}

// SignJSON encodes v (which must encode as a JSON object) as RFC 8785
// canonical JSON (CanonJCS) with a _signature field: an Ed25519 signature
// over the canonical encoding of the object without _signature, after the
// domain string of the canonicalization. The output is itself the
// canonical encoding of the signed object. A _signature member v already
// has is replaced.
//
// A json.RawMessage or []byte is taken as JSON text; a Marshaler's
// output, and anything else json.Marshal encodes, likewise. A name
// repeated in any object is an error (it would sign one reading of an
// ambiguous object), as are strings that are not valid UTF-8 and numbers
// beyond the range of a double.
func SignJSON(v any, signer *Signer) ([]byte, error) {
	raw, err := jsonOf(v)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	body, _, err := canonicalObject(raw)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	sig := JSONSignature{Algo: algoEd25519, Canon: CanonJCS, KeyID: signer.KeyID(),
		Sig: b64.EncodeToString(signer.Sign(append([]byte(jsonDomainJCS), body...)))}
	member, err := json.Marshal(sig) // ASCII, its names in canonical order
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	// The object with the member, canonical again: JCS puts it in place.
	withSig := make([]byte, 0, len(body)+len(member)+len(SignatureField)+4)
	withSig = append(withSig, `{"`+SignatureField+`":`...)
	withSig = append(withSig, member...)
	if len(body) > 2 {
		withSig = append(withSig, ',')
	}
	withSig = append(withSig, body[1:]...)
	out, err := jcs.Transform(withSig)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	return out, nil
}

// jsonOf is v as JSON text.
func jsonOf(v any) ([]byte, error) {
	switch m := v.(type) {
	case json.RawMessage:
		return m, nil
	case []byte:
		return m, nil
	case json.Marshaler:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return nil, errNotObject // json.Marshal writes null
		}
		raw, err := m.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%T.MarshalJSON: %w", v, err)
		}
		return raw, nil
	}
	return json.Marshal(v)
}

var errNotObject = errors.New("not a JSON object")

// canonicalObject returns the RFC 8785 encoding of the JSON object raw
// without its top-level _signature member, and that member's value (nil
// when there is none).
func canonicalObject(raw []byte) (body, sig []byte, err error) {
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, nil, err
	}
	if len(canon) == 0 || canon[0] != '{' {
		return nil, nil, errNotObject
	}
	if !bytes.Contains(canon, []byte(`"`+SignatureField+`"`)) {
		return canon, nil, nil // no such member (what SignJSON is mostly given)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(canon, &members); err != nil {
		return nil, nil, err
	}
	sig, ok := members[SignatureField]
	if !ok {
		return canon, nil, nil
	}
	delete(members, SignatureField)
	rest, err := json.Marshal(members)
	if err != nil {
		return nil, nil, err
	}
	if body, err = jcs.Transform(rest); err != nil {
		return nil, nil, err
	}
	return body, sig, nil
}

// VerifyJSON checks data signed by SignJSON (or, without a canon id, by
// spool before RFC 8785: CanonLegacy) against keyring and, when v is not
// nil, decodes the object (without _signature) into v. Whitespace and key
// order may have changed since signing; any change of a name or value
// fails, as does a name repeated in any object, or data after the object.
func VerifyJSON(data []byte, keyring *Keyring, v any) (JSONSignature, error) {
	canon, err := signatureCanon(data)
	if err != nil {
		return JSONSignature{}, fmt.Errorf("verify json: %w", err)
	}
	var msg, rawSig []byte
	switch canon {
	case CanonJCS:
		body, s, err := canonicalObject(data)
		if err != nil {
			return JSONSignature{}, fmt.Errorf("verify json: %w", err)
		}
		msg, rawSig = append([]byte(jsonDomainJCS), body...), s
	case CanonLegacy:
		body, s, err := legacyCanonicalObject(data)
		if err != nil {
			return JSONSignature{}, fmt.Errorf("verify json: %w", err)
		}
		msg, rawSig = append([]byte(jsonDomainLegacy), body...), s
	default:
		return JSONSignature{}, fmt.Errorf("verify json: unknown canonicalization %q", canon)
	}
	if rawSig == nil {
		return JSONSignature{}, fmt.Errorf("verify json: no %s field", SignatureField)
	}
	var sig JSONSignature
	if err := json.Unmarshal(rawSig, &sig); err != nil {
		return JSONSignature{}, fmt.Errorf("verify json: %s: %w", SignatureField, err)
	}
	if sig.Canon != canon {
		return sig, fmt.Errorf("verify json: canonicalization %q, read as %q", sig.Canon, canon)
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
		domain := len(jsonDomainJCS)
		if canon == CanonLegacy {
			domain = len(jsonDomainLegacy)
		}
		if err := json.Unmarshal(msg[domain:], v); err != nil {
			return sig, fmt.Errorf("verify json: decode: %w", err)
		}
	}
	return sig, nil
}

// signatureCanon reads the canonicalization id of data's _signature
// member ("" without one, or without an id): which canonicalization then
// checks the whole object, strictly.
func signatureCanon(data []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return "", err
	}
	if top == nil {
		return "", errNotObject
	}
	var sig map[string]json.RawMessage
	if raw, ok := top[SignatureField]; !ok || json.Unmarshal(raw, &sig) != nil || sig["canon"] == nil {
		return CanonLegacy, nil
	}
	var canon string
	if err := json.Unmarshal(sig["canon"], &canon); err != nil {
		return "", fmt.Errorf("%s canon: %w", SignatureField, err)
	}
	return canon, nil
}
