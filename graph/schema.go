package graph

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"

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

func parseSchema(m map[string]any, path string, top bool) (*Schema, error) {
	at := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	s := &Schema{}
	_, hasAP := m["additionalProperties"]
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch k {
		case "type":
			t, ok := v.(string)
			if !ok || !slices.Contains(schemaTypes, t) {
				return nil, fmt.Errorf("%s: %s is not a type (want one of %s)", at(k), shortText(v), strings.Join(schemaTypes, ", "))
			}
			s.Type = t
		case "description":
			d, ok := v.(string)
			if !ok && v != nil {
				return nil, fmt.Errorf("%s: must be text", at(k))
			}
			s.Description = d
		case "default":
			s.Default, s.HasDefault = v, true
		case "enum":
			l, ok := v.([]any)
			if !ok || len(l) == 0 {
				return nil, fmt.Errorf("%s: must be a non-empty list", at(k))
			}
			s.Enum = l
		case "properties":
			pm, ok := v.(map[string]any)
			if !ok && v != nil {
				return nil, fmt.Errorf("%s: must be a mapping of name to schema", at(k))
			}
			s.Properties = make(map[string]*Schema, len(pm))
			for _, name := range sortedKeys(pm) {
				sub, ok := pm[name].(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: must be a schema (a mapping), not %s", at(k+"."+name), jsonType(pm[name]))
				}
				ps, err := parseSchema(sub, at(k+"."+name), false)
				if err != nil {
					return nil, err
				}
				s.Properties[name] = ps
			}
		case "required":
			l, ok := v.([]any)
			if !ok && v != nil {
				return nil, fmt.Errorf("%s: must be a list of property names", at(k))
			}
			for _, e := range l {
				name, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%s: %s is not a property name", at(k), shortText(e))
				}
				if !slices.Contains(s.Required, name) {
					s.Required = append(s.Required, name)
				}
			}
		case "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: must be true or false (schemas for extra properties are not supported)", at(k))
			}
			s.AdditionalProperties = b
		case "items":
			im, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: must be a schema (a mapping)", at(k))
			}
			is, err := parseSchema(im, at(k), false)
			if err != nil {
				return nil, err
			}
			s.Items = is
		default:
			if slices.Contains(annotationKeys, k) {
				continue
			}
			return nil, fmt.Errorf("%s", unknownKey(at(k), prefixed(path, schemaKeys)))
		}
	}
	if s.Type == "" && (s.Properties != nil || s.Required != nil) {
		s.Type = "object"
	}
	if s.Items != nil && s.Type != "array" {
		return nil, fmt.Errorf("%s: items needs type array", at("items"))
	}
	if s.Properties != nil && s.Type != "object" {
		return nil, fmt.Errorf("%s: properties needs type object", at("properties"))
	}
	if !top && !hasAP && s.Type == "object" && len(s.Properties) == 0 {
		s.AdditionalProperties = true
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok && !s.AdditionalProperties {
			return nil, fmt.Errorf("%s: %q is required but not a declared property", at("required"), r)
		}
	}
	if s.HasDefault && s.Default != nil {
		if _, err := s.check(DeepCopy(s.Default), at("default")); err != nil {
			return nil, err
		}
	}
	for i, e := range s.Enum {
		if _, err := s.checkType(e, false); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", at("enum"), i, err)
		}
	}
	return s, nil
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
		l := v.([]any)
		for i, e := range l {
			r, err := s.Items.validate(e, fmt.Sprintf("%s[%d]", path, i), probs)
			if err != nil {
				*probs = append(*probs, Diagnostic{Key: fmt.Sprintf("%s[%d]", path, i), Message: err.Error()})
				continue
			}
			l[i] = r
		}
	}
	if s.Type != "object" {
		return v, s.checkEnum(v)
	}
	m := v.(map[string]any)
	for _, name := range sortedKeys(s.Properties) {
		ps := s.Properties[name]
		if e, ok := m[name]; (!ok || e == nil) && ps.HasDefault && ps.Default != nil {
			m[name] = DeepCopy(ps.Default)
		}
	}
	for _, name := range s.Required {
		if e, ok := m[name]; !ok || e == nil {
			*probs = append(*probs, Diagnostic{Key: path + "." + name, Message: "required"})
		}
	}
	for _, name := range sortedKeys(m) {
		key := path + "." + name
		ps, declared := s.Properties[name]
		switch {
		case !declared && !s.AdditionalProperties:
			msg := "unknown input"
			if n := nearest(name, sortedKeys(s.Properties)); n != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", n)
			} else if len(s.Properties) > 0 {
				msg += " (declared: " + strings.Join(sortedKeys(s.Properties), ", ") + ")"
			}
			*probs = append(*probs, Diagnostic{Key: key, Message: msg})
		case !declared:
		case m[name] == nil:
			delete(m, name) // null is absent (and required was checked)
		default:
			r, err := ps.validate(m[name], key, probs)
			if err != nil {
				*probs = append(*probs, Diagnostic{Key: key, Message: err.Error()})
				continue
			}
			m[name] = r
		}
	}
	return m, s.checkEnum(m)
}

// checkType coerces v to s.Type (text to a number, a boolean, or a JSON
// list or object when coerce) and reports a mismatch.
func (s *Schema) checkType(v any, coerce bool) (any, error) {
	switch s.Type {
	case "":
		return v, nil
	case "string":
		if _, ok := v.(string); ok {
			return v, nil
		}
	case "boolean":
		if _, ok := v.(bool); ok {
			return v, nil
		}
		if str, ok := v.(string); ok && coerce {
			if b, ok := thread.Bool(str); ok {
				return b, nil
			}
		}
	case "integer", "number":
		var f float64
		var err error
		if str, ok := v.(string); ok {
			if !coerce {
				break
			}
			f, err = thread.Number(str)
		} else if _, ok := v.(bool); ok {
			break
		} else {
			f, err = thread.Number(v)
		}
		if err != nil {
			break
		}
		if s.Type == "number" {
			return f, nil
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int(f), nil
		}
		return nil, fmt.Errorf("%s is not a whole number", shortText(v))
	case "array":
		if str, ok := v.(string); ok && coerce && strings.HasPrefix(strings.TrimSpace(str), "[") {
			if d, err := decodeJSON([]byte(str)); err == nil {
				v = d
			}
		}
		if l, ok := v.([]any); ok {
			return l, nil
		}
		if rv := reflect.ValueOf(v); v != nil && (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array) {
			l := make([]any, rv.Len())
			for i := range l {
				l[i] = rv.Index(i).Interface()
			}
			return l, nil
		}
	case "object":
		if str, ok := v.(string); ok && coerce && strings.HasPrefix(strings.TrimSpace(str), "{") {
			if d, err := decodeJSON([]byte(str)); err == nil {
				v = d
			}
		}
		if m, ok := v.(map[string]any); ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("must be %s, not %s", typeArticle(s.Type), jsonType(v))
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
