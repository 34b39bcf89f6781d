package graph

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/thread"
)

// Schema is the JSON-Schema subset of section 6.1 that describes a run's
// inputs (and, recursively, an object's properties or a list's items).
type Schema struct {
	Type        string // string, number, integer, boolean, array, object; "" accepts any value
	Description string
	Default     any // meaningful when HasDefault
	HasDefault  bool
	Enum        []any
	Properties  map[string]*Schema
	Required    []string
	// AdditionalProperties lets an object hold keys that Properties does
	// not declare. It defaults to false, except on a nested object that
	// declares no properties at all (a free-form object).
	AdditionalProperties bool
	Items                *Schema
}

// Schema types.
var schemaTypes = []string{"string", "number", "integer", "boolean", "array", "object"}

var schemaKeys = []string{"type", "description", "default", "enum", "properties", "required", "additionalProperties", "items"}

// annotationKeys are JSON-Schema keywords accepted and not enforced.
var annotationKeys = []string{"title", "examples", "format", "$schema", "$id", "$comment"}

// ParseSchema reads an inputs schema from its decoded YAML or JSON form.
// The top level must be an object schema (type may be left out).
func ParseSchema(v any) (*Schema, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a mapping (a JSON-Schema object), not %s", jsonType(v))
	}
	s, err := parseSchema(m, "", true)
	if err != nil {
		return nil, err
	}
	if s.Type == "" {
		s.Type = "object"
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("type: the inputs schema must be an object, not %s", s.Type)
	}
	return s, nil
}

// parseSchema reads the schema at path from its decoded form: each
// keyword in turn, then the shape they make together, then the schema's
// own values. top marks the inputs schema itself, whose object refuses
// unknown keys even when it declares no properties.
func parseSchema(m map[string]any, path string, top bool) (*Schema, error) {
	s := &Schema{}
	for _, k := range sortedKeys(m) {
		if err := s.parseKey(k, m[k], path); err != nil {
			return nil, err
		}
	}
	_, hasAP := m["additionalProperties"]
	if err := s.settleShape(path, top, hasAP); err != nil {
		return nil, err
	}
	if err := s.checkOwnValues(path); err != nil {
		return nil, err
	}
	return s, nil
}

// schemaKey is the path of keyword k of the schema at path, as errors
// name it ("items", "properties.repo.type").
func schemaKey(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// parseKey reads one keyword of the schema at path into s. Annotations
// are accepted and dropped; any other unknown keyword is an error naming
// the keywords the subset knows.
func (s *Schema) parseKey(k string, v any, path string) error {
	at := schemaKey(path, k)
	switch k {
	case "type":
		return s.parseType(v, at)
	case "description":
		return s.parseDescription(v, at)
	case "default":
		s.Default, s.HasDefault = v, true
	case "enum":
		return s.parseEnum(v, at)
	case "properties":
		return s.parseProperties(v, at)
	case "required":
		return s.parseRequired(v, at)
	case "additionalProperties":
		return s.parseAdditional(v, at)
	case "items":
		return s.parseItems(v, at)
	default:
		if !slices.Contains(annotationKeys, k) {
			return fmt.Errorf("%s", unknownKey(at, prefixed(path, schemaKeys)))
		}
	}
	return nil
}

// parseType reads type, which must name one of the subset's types.
func (s *Schema) parseType(v any, at string) error {
	t, ok := v.(string)
	if !ok || !slices.Contains(schemaTypes, t) {
		return fmt.Errorf("%s: %s is not a type (want one of %s)", at, shortText(v), strings.Join(schemaTypes, ", "))
	}
	s.Type = t
	return nil
}

// parseDescription reads description, text or null.
func (s *Schema) parseDescription(v any, at string) error {
	d, ok := v.(string)
	if !ok && v != nil {
		return fmt.Errorf("%s: must be text", at)
	}
	s.Description = d
	return nil
}

// parseEnum reads enum, a non-empty list. Its values are checked against
// the type once every keyword is read (checkOwnValues).
func (s *Schema) parseEnum(v any, at string) error {
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		return fmt.Errorf("%s: must be a non-empty list", at)
	}
	s.Enum = l
	return nil
}

// parseProperties reads properties, a mapping of name to schema, parsing
// each property's schema in turn (in name order, so the first error is
// always the same one).
func (s *Schema) parseProperties(v any, at string) error {
	pm, ok := v.(map[string]any)
	if !ok && v != nil {
		return fmt.Errorf("%s: must be a mapping of name to schema", at)
	}
	s.Properties = make(map[string]*Schema, len(pm))
	for _, name := range sortedKeys(pm) {
		sub, ok := pm[name].(map[string]any)
		if !ok {
			return fmt.Errorf("%s: must be a schema (a mapping), not %s", at+"."+name, jsonType(pm[name]))
		}
		ps, err := parseSchema(sub, at+"."+name, false)
		if err != nil {
			return err
		}
		s.Properties[name] = ps
	}
	return nil
}

// parseRequired reads required, a list of property names kept once each.
// Whether they are declared is checked once every keyword is read.
func (s *Schema) parseRequired(v any, at string) error {
	l, ok := v.([]any)
	if !ok && v != nil {
		return fmt.Errorf("%s: must be a list of property names", at)
	}
	for _, e := range l {
		name, ok := e.(string)
		if !ok {
			return fmt.Errorf("%s: %s is not a property name", at, shortText(e))
		}
		if !slices.Contains(s.Required, name) {
			s.Required = append(s.Required, name)
		}
	}
	return nil
}

// parseAdditional reads additionalProperties, which the subset takes only
// as true or false.
func (s *Schema) parseAdditional(v any, at string) error {
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("%s: must be true or false (schemas for extra properties are not supported)", at)
	}
	s.AdditionalProperties = b
	return nil
}

// parseItems reads items, the schema of a list's elements.
func (s *Schema) parseItems(v any, at string) error {
	im, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: must be a schema (a mapping)", at)
	}
	is, err := parseSchema(im, at, false)
	if err != nil {
		return err
	}
	s.Items = is
	return nil
}

// settleShape completes the schema at path once its keywords are read:
// properties or required without a type mean an object, items and
// properties need the type they describe, and a nested object that
// declares no properties and says nothing of additionalProperties is
// free-form.
func (s *Schema) settleShape(path string, top, hasAP bool) error {
	if s.Type == "" && (s.Properties != nil || s.Required != nil) {
		s.Type = "object"
	}
	if s.Items != nil && s.Type != "array" {
		return fmt.Errorf("%s: items needs type array", schemaKey(path, "items"))
	}
	if s.Properties != nil && s.Type != "object" {
		return fmt.Errorf("%s: properties needs type object", schemaKey(path, "properties"))
	}
	if !top && !hasAP && s.Type == "object" && len(s.Properties) == 0 {
		s.AdditionalProperties = true
	}
	return nil
}

// checkOwnValues checks what the schema at path says against itself:
// required names declared properties (unless extra ones are allowed), and
// the default and the enum's values fit the type, so that a bad schema
// fails when the graph is read rather than when a run starts.
func (s *Schema) checkOwnValues(path string) error {
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok && !s.AdditionalProperties {
			return fmt.Errorf("%s: %q is required but not a declared property", schemaKey(path, "required"), r)
		}
	}
	if s.HasDefault && s.Default != nil {
		if _, err := s.check(DeepCopy(s.Default), schemaKey(path, "default")); err != nil {
			return err
		}
	}
	for i, e := range s.Enum {
		if _, err := s.checkType(e, false); err != nil {
			return fmt.Errorf("%s[%d]: %w", schemaKey(path, "enum"), i, err)
		}
	}
	return nil
}

func prefixed(path string, keys []string) []string {
	if path == "" {
		return keys
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = path + "." + k
	}
	return out
}

// InputsError lists what is wrong with a run's inputs, one problem per
// key.
type InputsError struct {
	Problems []Diagnostic // Key is the input's path ("inputs.repo")
}

func (e *InputsError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, d := range e.Problems {
		parts[i] = d.String()
	}
	return "invalid inputs: " + strings.Join(parts, "; ")
}

// ValidateInputs checks a run's inputs against the graph's schema (6.1):
// defaults first, then required keys and types (strings from --input are
// coerced to the declared type: "3" → 3 for an integer, "true" → true),
// then unknown keys, which are refused unless additionalProperties is
// true. It returns the validated inputs (a copy); the error is an
// *InputsError naming every bad key. A graph without a schema accepts any
// inputs unchanged.
func (g *Graph) ValidateInputs(in map[string]any) (map[string]any, error) {
	if g.Inputs == nil {
		if in == nil {
			return map[string]any{}, nil
		}
		return DeepCopy(in).(map[string]any), nil
	}
	var v any = map[string]any{}
	if in != nil {
		v = DeepCopy(in)
	}
	var probs []Diagnostic
	out, err := g.Inputs.validate(v, "inputs", &probs)
	if err != nil {
		probs = append(probs, Diagnostic{Key: "inputs", Message: err.Error()})
	}
	if len(probs) > 0 {
		sort.SliceStable(probs, func(i, j int) bool { return probs[i].Key < probs[j].Key })
		return nil, &InputsError{Problems: probs}
	}
	return out.(map[string]any), nil
}

// validate checks v (owned by the caller) against s, collecting the
// problems of an object's keys in probs.
func (s *Schema) validate(v any, path string, probs *[]Diagnostic) (any, error) {
	v, err := s.checkType(v, true)
	if err != nil {
		return nil, err
	}
	if s.Type == "array" && s.Items != nil {
		s.validateItems(v.([]any), path, probs)
	}
	if s.Type != "object" {
		return v, s.checkEnum(v)
	}
	m := v.(map[string]any)
	s.applyDefaults(m)
	s.checkRequired(m, path, probs)
	for _, name := range sortedKeys(m) {
		s.validateKey(m, name, path+"."+name, probs)
	}
	return m, s.checkEnum(m)
}

// validateItems checks each element of the list l against s.Items in
// place, so that coerced elements replace the originals; a bad element
// is one problem, named by its index.
func (s *Schema) validateItems(l []any, path string, probs *[]Diagnostic) {
	for i, e := range l {
		r, err := s.Items.validate(e, fmt.Sprintf("%s[%d]", path, i), probs)
		if err != nil {
			*probs = append(*probs, Diagnostic{Key: fmt.Sprintf("%s[%d]", path, i), Message: err.Error()})
			continue
		}
		l[i] = r
	}
}

// applyDefaults fills in the object m the declared properties that are
// absent or null and have a non-null default, before required is
// checked, so that a default satisfies it.
func (s *Schema) applyDefaults(m map[string]any) {
	for _, name := range sortedKeys(s.Properties) {
		ps := s.Properties[name]
		if e, ok := m[name]; (!ok || e == nil) && ps.HasDefault && ps.Default != nil {
			m[name] = DeepCopy(ps.Default)
		}
	}
}

// checkRequired records a problem for each required property of m that
// is absent or null.
func (s *Schema) checkRequired(m map[string]any, path string, probs *[]Diagnostic) {
	for _, name := range s.Required {
		if e, ok := m[name]; !ok || e == nil {
			*probs = append(*probs, Diagnostic{Key: path + "." + name, Message: "required"})
		}
	}
}

// validateKey checks the key name of the object m (its path is key): an
// undeclared key is a problem unless extra properties are allowed, a
// null is dropped as absent, and a declared value is validated and
// replaced by its coerced form.
func (s *Schema) validateKey(m map[string]any, name, key string, probs *[]Diagnostic) {
	ps, declared := s.Properties[name]
	switch {
	case !declared && !s.AdditionalProperties:
		*probs = append(*probs, Diagnostic{Key: key, Message: s.unknownInput(name)})
	case !declared:
	case m[name] == nil:
		delete(m, name) // null is absent (and required was checked)
	default:
		r, err := ps.validate(m[name], key, probs)
		if err != nil {
			*probs = append(*probs, Diagnostic{Key: key, Message: err.Error()})
			return
		}
		m[name] = r
	}
}

// unknownInput is the problem of an undeclared key name: the nearest
// declared name if one is close, else the declared names.
func (s *Schema) unknownInput(name string) string {
	msg := "unknown input"
	if n := spelling.Nearest(name, sortedKeys(s.Properties)); n != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", n)
	} else if len(s.Properties) > 0 {
		msg += " (declared: " + strings.Join(sortedKeys(s.Properties), ", ") + ")"
	}
	return msg
}

// checkType coerces v to s.Type (text to a number, a boolean, or a JSON
// list or object when coerce) and reports a mismatch.
func (s *Schema) checkType(v any, coerce bool) (any, error) {
	if s.Type == "" {
		return v, nil
	}
	if check := typeCheckers[s.Type]; check != nil {
		if out, ok, err := check(s, v, coerce); ok || err != nil {
			return out, err
		}
	}
	return nil, fmt.Errorf("must be %s, not %s", typeArticle(s.Type), jsonType(v))
}

// typeCheckers coerce a value to each schema type. A checker returns the
// value and true when it fits; false (with no error) makes checkType
// report the mismatch, and an error is a more precise complaint.
var typeCheckers = map[string]func(s *Schema, v any, coerce bool) (any, bool, error){
	"string": func(_ *Schema, v any, _ bool) (any, bool, error) {
		_, ok := v.(string)
		return v, ok, nil
	},
	"boolean": func(_ *Schema, v any, coerce bool) (any, bool, error) {
		b, ok := booleanOf(v, coerce)
		return b, ok, nil
	},
	"integer": checkNumber,
	"number":  checkNumber,
	"array": func(_ *Schema, v any, coerce bool) (any, bool, error) {
		l, ok := listOf(v, coerce)
		return l, ok, nil
	},
	"object": func(_ *Schema, v any, coerce bool) (any, bool, error) {
		m, ok := jsonText(v, coerce, "{").(map[string]any)
		return m, ok, nil
	},
}

// booleanOf reads a boolean, or when coerce its text form ("true").
func booleanOf(v any, coerce bool) (bool, bool) {
	if b, ok := v.(bool); ok {
		return b, true
	}
	if str, ok := v.(string); ok && coerce {
		return thread.Bool(str)
	}
	return false, false
}

// checkNumber reads a number (text only when coerce, never a boolean);
// for an integer schema it must be whole and exact in a float64.
func checkNumber(s *Schema, v any, coerce bool) (any, bool, error) {
	f, ok := numberOf(v, coerce)
	switch {
	case !ok:
		return nil, false, nil
	case s.Type == "number":
		return f, true, nil
	case f == math.Trunc(f) && math.Abs(f) < 1<<53:
		return int(f), true, nil
	}
	return nil, false, fmt.Errorf("%s is not a whole number", shortText(v))
}

// numberOf reads v as a number: text only when coerce, and a boolean
// never (thread.Number would read it as 0 or 1).
func numberOf(v any, coerce bool) (float64, bool) {
	switch v.(type) {
	case string:
		if !coerce {
			return 0, false
		}
	case bool:
		return 0, false
	}
	f, err := thread.Number(v)
	return f, err == nil
}

// listOf reads a list: a []any, any other Go slice or array (copied into
// a []any), or when coerce the JSON text of a list.
func listOf(v any, coerce bool) ([]any, bool) {
	v = jsonText(v, coerce, "[")
	if l, ok := v.([]any); ok {
		return l, true
	}
	if rv := reflect.ValueOf(v); v != nil && (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array) {
		l := make([]any, rv.Len())
		for i := range l {
			l[i] = rv.Index(i).Interface()
		}
		return l, true
	}
	return nil, false
}

// jsonText decodes v when coerce and v is text that starts (after
// spaces) with open, the first character of a JSON list or object;
// otherwise, or when the text is not JSON, it returns v unchanged.
func jsonText(v any, coerce bool, open string) any {
	str, ok := v.(string)
	if !ok || !coerce || !strings.HasPrefix(strings.TrimSpace(str), open) {
		return v
	}
	if d, err := decodeJSON([]byte(str)); err == nil {
		return d
	}
	return v
}

// check validates a default value (not coerced), returning the first
// problem.
func (s *Schema) check(v any, path string) (any, error) {
	var probs []Diagnostic
	out, err := s.validate(v, path, &probs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(probs) > 0 {
		return nil, errors.New(probs[0].String())
	}
	return out, nil
}

func (s *Schema) checkEnum(v any) error {
	if len(s.Enum) == 0 {
		return nil
	}
	for _, e := range s.Enum {
		if sameValue(v, e) {
			return nil
		}
	}
	opts := make([]string, len(s.Enum))
	for i, e := range s.Enum {
		opts[i] = shortText(e)
	}
	return fmt.Errorf("%s is not one of %s", shortText(v), strings.Join(opts, ", "))
}

// sameValue compares JSON-like values, numbers by value whatever their Go
// type.
func sameValue(a, b any) bool {
	if x, ok := toFloat(a); ok {
		y, ok := toFloat(b)
		return ok && x == y
	}
	if _, ok := toFloat(b); ok {
		return false
	}
	ja, err1 := compactJSON(a)
	jb, err2 := compactJSON(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

func typeArticle(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	}
	return "a " + t
}

// InitialState is the run's first state (6.2): a deep copy of
// config.state with state["inputs"] set to the validated inputs.
func (g *Graph) InitialState(inputs map[string]any) map[string]any {
	st := map[string]any{}
	for k, v := range g.State {
		st[k] = DeepCopy(v)
	}
	if inputs == nil {
		inputs = map[string]any{}
	}
	st[ScopeInputs] = DeepCopy(inputs)
	return st
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
