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

// rejectDuplicateKeys fails on the first name repeated in one object of
// the JSON data, at any depth, and on data that does not parse. stack
// holds the objects and arrays open around the token read, the innermost
// last.
func rejectDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*nameFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var top *nameFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		d, delim := tok.(json.Delim)
		switch {
		case !delim:
			if err := top.read(tok); err != nil {
				return err
			}
		case d == '{' || d == '[':
			top.valueRead()
			stack = append(stack, newNameFrame(d))
		default:
			stack = stack[:len(stack)-1]
		}
	}
}

// nameFrame is an object or an array being read: an object's names so
// far, and whether its next string token is a name.
type nameFrame struct {
	obj  bool
	keys map[string]bool
	key  bool // next string token is a key
}

// newNameFrame is the frame of the object ('{') or array ('[') opened.
func newNameFrame(open json.Delim) *nameFrame {
	if open == '{' {
		return &nameFrame{obj: true, keys: map[string]bool{}, key: true}
	}
	return &nameFrame{}
}

// read reads a token of f that is no delimiter: a string in a name's
// place is a name, an error when f has it already; anything else is a
// value. A nil f (the top level) holds no names.
func (f *nameFrame) read(tok json.Token) error {
	if name, ok := tok.(string); ok && f != nil && f.obj && f.key {
		if f.keys[name] {
			return fmt.Errorf("duplicate key %q", name)
		}
		f.keys[name] = true
		f.key = false
		return nil
	}
	f.valueRead()
	return nil
}

// valueRead notes that a value of f was read: in an object, the next
// string token is a name again. A nil f (the top level) holds no names.
func (f *nameFrame) valueRead() {
	if f != nil && f.obj {
		f.key = true
	}
}
