package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// CanonLegacy, the canonical JSON of objects signed before RFC 8785: the
// object decoded into map[string]any (numbers as json.Number, as written)
// and encoded again by encoding/json without HTML escaping. That is
// members sorted by their names' bytes, strings as encoding/json writes
// them (U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD), no
// insignificant whitespace. A name repeated in any object is an error.

// legacyCanonicalObject returns the CanonLegacy encoding of the JSON
// object data without its top-level _signature member, and that member's
// value (nil when there is none). marshal writes CanonLegacy of a decoded
// object: encoding/json sorts map keys.
func legacyCanonicalObject(data []byte) (body, sig []byte, err error) {
	obj, err := decodeObject(data)
	if err != nil {
		return nil, nil, err
	}
	if s, ok := obj[SignatureField]; ok {
		if sig, err = marshal(s); err != nil {
			return nil, nil, err
		}
		delete(obj, SignatureField)
	}
	if body, err = marshal(obj); err != nil {
		return nil, nil, err
	}
	return body, sig, nil
}

// decodeObject parses a JSON object keeping numbers as written. Trailing
// data and repeated names are rejected (a repeated name would let two
// readers see different values under one signature).
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
		return nil, errNotObject
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
