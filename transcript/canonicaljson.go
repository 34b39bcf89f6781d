package transcript

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonical JSON is what SignJSON signs: the encoding of a JSON object
// decoded into map[string]any (numbers as json.Number) and encoded again by
// encoding/json's Encoder with SetEscapeHTML(false). That is:
//
//   - object members sorted by their decoded names in byte order (how
//     encoding/json sorts map keys), a repeated name keeping its last value
//     (as a map does), or an error where repeats are rejected;
//   - arrays in order, numbers and true/false/null as written;
//   - strings decoded (escapes resolved, invalid UTF-8 and lone surrogates
//     as U+FFFD) and encoded as encoding/json encodes a string without HTML
//     escaping;
//   - no insignificant whitespace.
//
// The canonicalizer below produces exactly that from the JSON text, without
// building the map: it is the hot half of every SignJSON and VerifyJSON.
// The reference implementation (decode, then encode) lives in
// signedjson_ref_test.go, and FuzzCanonicalAgrees holds the two to the same
// bytes and the same errors.
//
// Its scanner, as strict as encoding/json's, also serves the payload
// reader (payloadread.go) and the tools JSON of capabilities.md
// (appendIndentedJSON).

// maxJSONDepth is encoding/json's nesting limit: a document nested deeper
// is a syntax error there, so it is one here.
const maxJSONDepth = 10000

// signatureName is SignatureField as bytes, for comparing decoded names.
var signatureName = []byte(SignatureField)

// canonMember is a member of an object being canonicalized: its decoded
// name and where it was written in the output.
type canonMember struct {
	key             []byte // decoded name
	start, val, end int    // output offsets: the member, its value, its end
}

// canonicalizer turns JSON text into canonical JSON. Get one with
// getCanonicalizer and put it back with release; not for concurrent use.
// For scanning alone (scanString, scanNumber, skip), canonicalizer{src: b}
// will do.
type canonicalizer struct {
	src     []byte
	reject  bool          // a repeated name is an error, else the last one wins
	members []canonMember // the members of every open object, innermost last
	tmp     []byte        // a decoded string value

	// The top-level object, after canonical: the output offset where a
	// _signature member belongs in sorted order, whether a member precedes
	// that offset, how many members were written (without _signature), and
	// the canonical value of the input's own _signature member, if any.
	sigAt    int
	sigAfter bool
	written  int
	hasSig   bool
	sig      []byte
}

var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

func getCanonicalizer() *canonicalizer { return canonicalizers.Get().(*canonicalizer) }

func (c *canonicalizer) release() {
	clear(c.members[:cap(c.members)]) // drop the references into the input
	c.members, c.src, c.sig = c.members[:0], nil, nil
	if cap(c.tmp) > 64<<10 {
		c.tmp = nil
	}
	canonicalizers.Put(c)
}

// canonical appends to dst the canonical encoding of the JSON object src
// without its top-level _signature member (whose canonical value, if any,
// is left in c.sig). Anything but one JSON object, optionally surrounded by
// whitespace, is an error, as is, when reject is set, a name repeated in
// any object. Offsets recorded in c are offsets in the returned slice.
func (c *canonicalizer) canonical(dst, src []byte, reject bool) ([]byte, error) {
	c.src, c.reject = src, reject
	c.members = c.members[:0]
	c.sigAt, c.sigAfter, c.written, c.hasSig, c.sig = 0, false, 0, false, nil
	i := skipSpace(src, 0)
	if i == len(src) {
		return dst, errors.New("unexpected end of JSON input")
	}
	if src[i] != '{' {
		return dst, errNotObject
	}
	dst, i, err := c.object(dst, i, 1)
	if err != nil {
		return dst, err
	}
	if skipSpace(src, i) != len(src) {
		return dst, errors.New("trailing data after the JSON object")
	}
	return dst, nil
}

func skipSpace(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (c *canonicalizer) syntaxError(i int, what string) error {
	if i >= len(c.src) {
		return fmt.Errorf("unexpected end of JSON input (%s)", what)
	}
	return fmt.Errorf("invalid character %q at offset %d %s", c.src[i], i, what)
}

// value appends the canonical encoding of the value at src[i] (no space
// before it) and returns the offset after it. depth counts the containers
// the value is in.
func (c *canonicalizer) value(dst []byte, i, depth int) ([]byte, int, error) {
	src := c.src
	if i >= len(src) {
		return dst, i, c.syntaxError(i, "looking for beginning of value")
	}
	switch b := src[i]; {
	case b == '{':
		return c.object(dst, i, depth+1)
	case b == '[':
		return c.array(dst, i, depth+1)
	case b == '"':
		end, simple, err := c.scanString(i)
		if err != nil {
			return dst, i, err
		}
		if simple {
			return append(dst, src[i:end]...), end, nil
		}
		c.tmp = unquoteJSON(c.tmp[:0], src[i+1:end-1])
		return appendJSONString(dst, c.tmp, false), end, nil
	case b == '-' || '0' <= b && b <= '9':
		end, err := c.scanNumber(i)
		if err != nil {
			return dst, i, err
		}
		return append(dst, src[i:end]...), end, nil
	case b == 't':
		return c.literal(dst, i, "true")
	case b == 'f':
		return c.literal(dst, i, "false")
	case b == 'n':
		return c.literal(dst, i, "null")
	}
	return dst, i, c.syntaxError(i, "looking for beginning of value")
}

func (c *canonicalizer) literal(dst []byte, i int, lit string) ([]byte, int, error) {
	end, err := c.scanLiteral(i, lit)
	if err != nil {
		return dst, i, err
	}
	return append(dst, lit...), end, nil
}

// scanLiteral returns the end of lit (true, false or null) at src[i].
func (c *canonicalizer) scanLiteral(i int, lit string) (int, error) {
	if !bytes.HasPrefix(c.src[i:], []byte(lit)) {
		j := i
		for j < len(c.src) && j-i < len(lit) && c.src[j] == lit[j-i] {
			j++
		}
		return i, c.syntaxError(j, "in literal "+lit)
	}
	return i + len(lit), nil
}

// skip returns the end of the value at src[i] (no space before it),
// checking it as canonical would, without writing anything. depth counts
// the containers the value is in.
func (c *canonicalizer) skip(i, depth int) (int, error) {
	src := c.src
	if i >= len(src) {
		return i, c.syntaxError(i, "looking for beginning of value")
	}
	switch b := src[i]; {
	case b == '{' || b == '[':
		if depth++; depth > maxJSONDepth {
			return i, c.syntaxError(i, "exceeded max depth")
		}
		end := byte('}')
		if b == '[' {
			end = ']'
		}
		i = skipSpace(src, i+1)
		if i < len(src) && src[i] == end {
			return i + 1, nil
		}
		for {
			if b == '{' {
				if i >= len(src) || src[i] != '"' {
					return i, c.syntaxError(i, "looking for beginning of object key string")
				}
				j, _, err := c.scanString(i)
				if err != nil {
					return i, err
				}
				if i = skipSpace(src, j); i >= len(src) || src[i] != ':' {
					return i, c.syntaxError(i, "after object key")
				}
				i = skipSpace(src, i+1)
			}
			j, err := c.skip(i, depth)
			if err != nil {
				return i, err
			}
			if i = skipSpace(src, j); i >= len(src) {
				return i, c.syntaxError(i, "after value")
			}
			switch src[i] {
			case end:
				return i + 1, nil
			case ',':
				i = skipSpace(src, i+1)
			default:
				return i, c.syntaxError(i, "after value")
			}
		}
	case b == '"':
		end, _, err := c.scanString(i)
		return end, err
	case b == '-' || '0' <= b && b <= '9':
		return c.scanNumber(i)
	case b == 't':
		return c.scanLiteral(i, "true")
	case b == 'f':
		return c.scanLiteral(i, "false")
	case b == 'n':
		return c.scanLiteral(i, "null")
	}
	return i, c.syntaxError(i, "looking for beginning of value")
}

// scanNumber returns the end of the number at src[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *canonicalizer) scanNumber(i int) (int, error) {
	src := c.src
	digits := func(j int) int {
		for j < len(src) && '0' <= src[j] && src[j] <= '9' {
			j++
		}
		return j
	}
	j := i
	if src[j] == '-' {
		j++
	}
	switch {
	case j < len(src) && src[j] == '0':
		j++
	case j < len(src) && '1' <= src[j] && src[j] <= '9':
		j = digits(j + 1)
	default:
		return i, c.syntaxError(j, "in numeric literal")
	}
	if j < len(src) && src[j] == '.' {
		k := digits(j + 1)
		if k == j+1 {
			return i, c.syntaxError(k, "after decimal point in numeric literal")
		}
		j = k
	}
	if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
		j++
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		k := digits(j)
		if k == j {
			return i, c.syntaxError(k, "in exponent of numeric literal")
		}
		j = k
	}
	return j, nil
}

// scanString checks the string at src[i] and returns the offset after its
// closing quote. simple reports that the string encodes canonically as it
// is: no escapes, valid UTF-8, no U+2028 or U+2029 (which the encoder
// escapes).
func (c *canonicalizer) scanString(i int) (end int, simple bool, err error) {
	src := c.src
	simple = true
	j := i + 1
	for j < len(src) {
		b := src[j]
		switch {
		case b == '"':
			return j + 1, simple, nil
		case b == '\\':
			simple = false
			j++
			if j >= len(src) {
				return i, false, c.syntaxError(j, "in string escape code")
			}
			switch src[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				j++
				for k := 0; k < 4; k++ {
					if j >= len(src) || unhex(src[j]) < 0 {
						return i, false, c.syntaxError(j, "in \\u hexadecimal character escape")
					}
					j++
				}
			default:
				return i, false, c.syntaxError(j, "in string escape code")
			}
		case b < ' ':
			return i, false, c.syntaxError(j, "in string literal")
		case b < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				simple = false
			}
			j += size
		}
	}
	return i, false, c.syntaxError(j, "in string literal")
}

func unhex(b byte) rune {
	switch {
	case '0' <= b && b <= '9':
		return rune(b - '0')
	case 'a' <= b && b <= 'f':
		return rune(b - 'a' + 10)
	case 'A' <= b && b <= 'F':
		return rune(b - 'A' + 10)
	}
	return -1
}

// key appends the canonical encoding of the object key at src[i] and
// returns its decoded value (aliasing src when it needs no decoding).
func (c *canonicalizer) key(dst []byte, i int) ([]byte, []byte, int, error) {
	end, simple, err := c.scanString(i)
	if err != nil {
		return dst, nil, i, err
	}
	if simple {
		return append(dst, c.src[i:end]...), c.src[i+1 : end-1], end, nil
	}
	k := unquoteJSON(nil, c.src[i+1:end-1])
	return appendJSONString(dst, k, false), k, end, nil
}

func (c *canonicalizer) array(dst []byte, i, depth int) ([]byte, int, error) {
	if depth > maxJSONDepth {
		return dst, i, c.syntaxError(i, "exceeded max depth")
	}
	src := c.src
	dst = append(dst, '[')
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	for {
		var err error
		if dst, i, err = c.value(dst, i, depth); err != nil {
			return dst, i, err
		}
		i = skipSpace(src, i)
		if i >= len(src) {
			return dst, i, c.syntaxError(i, "after array element")
		}
		switch src[i] {
		case ',':
			dst = append(dst, ',')
			i = skipSpace(src, i+1)
		case ']':
			return append(dst, ']'), i + 1, nil
		default:
			return dst, i, c.syntaxError(i, "after array element")
		}
	}
}

// object canonicalizes the object at src[i]. The members are written in
// input order as they are read, then, unless that order is already the
// canonical one, copied in sorted order past the end and moved back.
func (c *canonicalizer) object(dst []byte, i, depth int) ([]byte, int, error) {
	if depth > maxJSONDepth {
		return dst, i, c.syntaxError(i, "exceeded max depth")
	}
	src := c.src
	open := len(dst)
	dst = append(dst, '{')
	base := len(c.members)
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == '}' {
		if depth == 1 {
			c.sigAt = open + 1
		}
		return append(dst, '}'), i + 1, nil
	}
	for {
		if i >= len(src) || src[i] != '"' {
			return dst, i, c.syntaxError(i, "looking for beginning of object key string")
		}
		start := len(dst)
		var key []byte
		var err error
		if dst, key, i, err = c.key(dst, i); err != nil {
			return dst, i, err
		}
		if i = skipSpace(src, i); i >= len(src) || src[i] != ':' {
			return dst, i, c.syntaxError(i, "after object key")
		}
		dst = append(dst, ':')
		val := len(dst)
		if dst, i, err = c.value(dst, skipSpace(src, i+1), depth); err != nil {
			return dst, i, err
		}
		c.members = append(c.members, canonMember{key: key, start: start, val: val, end: len(dst)})
		i = skipSpace(src, i)
		if i >= len(src) {
			return dst, i, c.syntaxError(i, "after object key:value pair")
		}
		if src[i] == '}' {
			i++
			break
		}
		if src[i] != ',' {
			return dst, i, c.syntaxError(i, "after object key:value pair")
		}
		dst = append(dst, ',')
		i = skipSpace(src, i+1)
	}
	dst, err := c.endObject(dst, open, base, depth == 1)
	c.members = c.members[:base]
	return dst, i, err
}

// endObject puts the members of the object opened at dst[open] (c.members
// from base) in canonical order and closes it. At the top level it also
// drops _signature and records where it belongs.
func (c *canonicalizer) endObject(dst []byte, open, base int, top bool) ([]byte, error) {
	ms := c.members[base:]
	sorted := true
	for k := 1; k < len(ms); k++ {
		if bytes.Compare(ms[k-1].key, ms[k].key) >= 0 {
			sorted = false
			break
		}
	}
	if sorted && !top {
		return append(dst, '}'), nil
	}
	if !sorted {
		slices.SortStableFunc(ms, func(a, b canonMember) int { return bytes.Compare(a.key, b.key) })
	}
	tail := len(dst)
	n := 0
	if top {
		c.sigAt = open + 1
	}
	for k, m := range ms {
		if k+1 < len(ms) && bytes.Equal(ms[k+1].key, m.key) {
			if c.reject {
				return dst, fmt.Errorf("duplicate key %q", m.key)
			}
			continue // the last of a repeated name wins, as in a map
		}
		cmp := 1
		if top {
			if cmp = bytes.Compare(m.key, signatureName); cmp == 0 {
				c.hasSig = true
				c.sig = append([]byte(nil), dst[m.val:m.end]...)
				continue
			}
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, dst[m.start:m.end]...)
		n++
		if cmp < 0 { // sorts before _signature: the signature goes after it
			c.sigAt, c.sigAfter = open+1+len(dst)-tail, true
		}
	}
	if top {
		c.written = n
	}
	moved := copy(dst[open+1:], dst[tail:])
	return append(dst[:open+1+moved], '}'), nil
}

// unquoteJSON appends the decoded value of the JSON string body s (checked
// by scanString), as encoding/json decodes it: escapes resolved, a
// surrogate pair joined, a lone surrogate and every byte of invalid UTF-8
// replaced by U+FFFD.
func unquoteJSON(dst, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			r++
			switch s[r] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := getu4(s[r-1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
						dst = utf8.AppendRune(dst, dec)
						r += 6
						continue
					}
					rr = unicode.ReplacementChar
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // " \ /
				dst = append(dst, s[r])
			}
			r++
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst
}

// getu4 decodes \uXXXX from the beginning of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, b := range s[2:6] {
		h := unhex(b)
		if h < 0 {
			return -1
		}
		r = r*16 + h
	}
	return r
}

// appendJSONString appends s as a JSON string the way encoding/json
// writes it: with escapeHTML as json.Marshal (<, > and & escaped), without
// as an Encoder with SetEscapeHTML(false). Invalid UTF-8 becomes \ufffd;
// U+2028 and U+2029 are always escaped.
func appendJSONString[S []byte | string](dst []byte, s S, escapeHTML bool) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && (!escapeHTML || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // other control characters, and <, >, & when escaping HTML
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		n := min(len(s)-i, utf8.UTFMax)
		r, size := utf8.DecodeRuneInString(string(s[i : i+n])) // no allocation
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendIndentedJSON appends the JSON value src as json.MarshalIndent
// with prefix "" and indent "  " writes a json.RawMessage nested in depth
// containers: compacted with <, >, &, U+2028 and U+2029 escaped, then
// indented. Invalid JSON, or nesting past encoding/json's limit counted
// from the document's top, is an error.
func appendIndentedJSON(dst, src []byte, depth int) ([]byte, error) {
	c := canonicalizer{src: src}
	dst, i, err := c.indented(dst, skipSpace(src, 0), depth)
	if err != nil {
		return dst, err
	}
	if i = skipSpace(src, i); i != len(src) {
		return dst, c.syntaxError(i, "after top-level value")
	}
	return dst, nil
}

func (c *canonicalizer) indented(dst []byte, i, depth int) ([]byte, int, error) {
	src := c.src
	if i >= len(src) {
		return dst, i, c.syntaxError(i, "looking for beginning of value")
	}
	newline := func(dst []byte, depth int) []byte {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, "  "...)
		}
		return dst
	}
	switch b := src[i]; {
	case b == '{' || b == '[':
		if depth+1 > maxJSONDepth {
			return dst, i, c.syntaxError(i, "exceeded max depth")
		}
		end := byte('}')
		if b == '[' {
			end = ']'
		}
		dst = append(dst, b)
		if i = skipSpace(src, i+1); i < len(src) && src[i] == end {
			return append(dst, end), i + 1, nil
		}
		for {
			dst = newline(dst, depth+1)
			if b == '{' {
				if i >= len(src) || src[i] != '"' {
					return dst, i, c.syntaxError(i, "looking for beginning of object key string")
				}
				j, _, err := c.scanString(i)
				if err != nil {
					return dst, i, err
				}
				dst = appendHTMLEscaped(dst, src[i:j])
				if i = skipSpace(src, j); i >= len(src) || src[i] != ':' {
					return dst, i, c.syntaxError(i, "after object key")
				}
				dst = append(dst, ':', ' ')
				i = skipSpace(src, i+1)
			}
			var err error
			if dst, i, err = c.indented(dst, i, depth+1); err != nil {
				return dst, i, err
			}
			if i = skipSpace(src, i); i >= len(src) {
				return dst, i, c.syntaxError(i, "after value")
			}
			switch src[i] {
			case end:
				return append(newline(dst, depth), end), i + 1, nil
			case ',':
				dst = append(dst, ',')
				i = skipSpace(src, i+1)
			default:
				return dst, i, c.syntaxError(i, "after value")
			}
		}
	case b == '"':
		j, _, err := c.scanString(i)
		if err != nil {
			return dst, i, err
		}
		return appendHTMLEscaped(dst, src[i:j]), j, nil
	}
	j, err := c.skip(i, depth) // a number or a literal
	if err != nil {
		return dst, i, err
	}
	return append(dst, src[i:j]...), j, nil
}

// appendHTMLEscaped appends the JSON string token s with <, >, &, U+2028
// and U+2029 escaped, as json.Marshal compacts a json.RawMessage.
func appendHTMLEscaped(dst, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8:
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[s[i+2]&0xF])
			start = i + 3
			i += 2
		}
	}
	return append(dst, s[start:]...)
}
