package thread

import (
	"bytes"
	"encoding/json"
	"slices"
)

// MarshalJSON writes c as encoding/json does, but for spend, always a
// number with a fraction or an exponent (floatSpend).
func (c Cost) MarshalJSON() ([]byte, error) {
	type plain Cost
	b, err := json.Marshal(plain(c))
	return floatSpend(b), err
}

// floatSpend adds ".0" to the "spend" member of b, a flat JSON object,
// when encoding/json wrote it as a whole number: CLI.md's records show
// "spend": 0.0 and 1.0, and a reader that tells integers from floats
// (Python's json) then gets a float for a whole amount too. The value is
// the same number.
func floatSpend(b []byte) []byte {
	const key = `"spend":`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return b
	}
	j := i + len(key)
	k := j
	for k < len(b) && bytes.IndexByte([]byte("+-.0123456789eE"), b[k]) >= 0 {
		k++
	}
	if bytes.ContainsAny(b[j:k], ".eE") {
		return b
	}
	return slices.Concat(b[:k], []byte(".0"), b[k:])
}
