// Package yamlstrict decodes YAML that may hold only the keys its Go
// destination declares, with errors a user can act on: yaml.v3's
// "line 1: field turns not found in type provider.scriptFile" becomes
// "line 1: unknown key turns (expected context_window, price, latency,
// stream_delay or directives)", naming the keys of the mapping the
// unknown one sits in rather than a Go type.
package yamlstrict

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Decode decodes the first YAML document of data into v (a pointer),
// refusing unknown keys. An empty document leaves v as it is and returns
// nil. A document with unknown keys or values of the wrong type returns
// an *Error; a syntax error is yaml's.
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return Explain(err, v)
	}
	return nil
}

// Error is a document's unknown keys and mistyped values, one message
// each, in the order yaml found them.
type Error struct {
	Messages []string
}

func (e *Error) Error() string { return strings.Join(e.Messages, "; ") }

// unknownField is yaml.v3's message for a key KnownFields refused.
var unknownField = regexp.MustCompile(`^line (\d+): field (.+?) not found in type (.+)$`)

// Explain rewrites a *yaml.TypeError from decoding into v: each unknown
// key is named with the keys that may stand beside it. Any other error is
// returned as it is.
func Explain(err error, v any) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	types := map[string]reflect.Type{}
	collect(reflect.TypeOf(v), types)
	out := &Error{Messages: make([]string, len(te.Errors))}
	for i, m := range te.Errors {
		out.Messages[i] = m
		g := unknownField.FindStringSubmatch(m)
		if g == nil {
			continue
		}
		msg := fmt.Sprintf("line %s: unknown key %s", g[1], g[2])
		if t, ok := types[g[3]]; ok {
			if keys := Keys(t); len(keys) > 0 {
				msg += " (expected " + orList(keys) + ")"
			}
		}
		out.Messages[i] = msg
	}
	return out
}

// collect records every struct type reachable from t by its name as
// reflect prints it ("provider.scriptFile"), as yaml's messages name it.
func collect(t reflect.Type, seen map[string]reflect.Type) {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			t = t.Elem()
			continue
		case reflect.Map:
			collect(t.Key(), seen)
			t = t.Elem()
			continue
		case reflect.Struct:
			name := t.String()
			if _, ok := seen[name]; ok {
				return
			}
			seen[name] = t
			for i := range t.NumField() {
				collect(t.Field(i).Type, seen)
			}
		}
		return
	}
}

// Keys are the keys a mapping decoded into struct t may hold, in field
// order: each exported field's yaml name (its tag's, else its name in
// lower case, as yaml.v3 decodes it), an inline struct's keys in its
// place.
func Keys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			if ft := f.Type; ft.Kind() == reflect.Struct {
				keys = append(keys, Keys(ft)...)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}

// orList is "a", "a or b", "a, b or c".
func orList(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return strings.Join(keys[:len(keys)-1], ", ") + " or " + keys[len(keys)-1]
}
