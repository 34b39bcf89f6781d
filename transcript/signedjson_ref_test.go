package transcript

// signJSONRef signs as spool did before RFC 8785 (CanonLegacy, no canon
// id), for tests of what VerifyJSON still reads and the legacy side of the
// benchmarks: v (which must encode as a JSON object) as legacy canonical
// JSON with a _signature field, an Ed25519 signature over the canonical
// encoding of the object without _signature.

import (
	"bytes"
	"encoding/json"
	"fmt"
)

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
	canon, err := marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("sign json: %w", err)
	}
	obj[SignatureField] = map[string]any{"key_id": signer.KeyID(), "algo": algoEd25519,
		"sig": b64.EncodeToString(signer.Sign(append([]byte(jsonDomainLegacy), canon...)))}
	return marshal(obj)
}
