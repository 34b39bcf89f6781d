package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/internal/yamlstrict"
	"github.com/spool-run/spool/thread"
)

// readFirst returns the contents and path of the first of paths that exists
// in fsys; ok is false when none does.
func readFirst(fsys fs.FS, paths ...string) (data []byte, path string, ok bool, err error) {
	if fsys == nil {
		return nil, "", false, nil
	}
	for _, p := range paths {
		data, err := fs.ReadFile(fsys, p)
		if err == nil {
			return data, p, true, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, p, false, fmt.Errorf("read %s: %w", p, err)
		}
	}
	return nil, "", false, nil
}

// agentPaths are where the file name is looked up, in order (the package
// doc): .ai/config/agent/<name>.yaml, the spec's path, then
// .ai/config/<name>.yaml.
func agentPaths(name string) []string {
	return []string{".ai/config/agent/" + name + ".yaml", ".ai/config/" + name + ".yaml"}
}

// load parses the first of paths that exists in fsys with parse; when
// none does it returns missing.
func load[T any](fsys fs.FS, missing T, parse func(path string, data []byte) (T, error), paths ...string) (T, error) {
	data, p, ok, err := readFirst(fsys, paths...)
	if err != nil || !ok {
		return missing, err
	}
	return parse(p, data)
}

// decodeStrict decodes the YAML document of file p into v, refusing
// unknown keys; an empty document leaves v as it is.
func decodeStrict(p string, data []byte, v any) error {
	if err := yamlstrict.Decode(data, v); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// tree is a decoded YAML mapping with dotted-path helpers that name the
// file and key in their errors.
type tree struct {
	path string
	m    map[string]any
}

// parseTree parses file path, whose keys stand at the top level or under
// section.
func parseTree(path string, data []byte, section string) (tree, error) {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return tree{}, fmt.Errorf("%s: %w", path, err)
	}
	if m == nil {
		m = map[string]any{}
	}
	root := tree{path: path, m: m}
	sub, ok, err := root.sub(section)
	if err != nil || !ok {
		return root, err
	}
	return sub, nil
}

// sub returns the mapping at key, or an empty tree; a non-mapping is an error.
func (t tree) sub(key string) (tree, bool, error) {
	v, ok := t.get(key)
	if !ok || v == nil {
		return tree{path: t.path, m: map[string]any{}}, false, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return tree{}, false, fmt.Errorf("%s: %s: not a mapping", t.path, key)
	}
	return tree{path: t.path, m: m}, true, nil
}

// firstSub returns the mapping at the first of keys present, and that
// key ("" when none is); a non-mapping is an error (see sub).
func (t tree) firstSub(keys ...string) (tree, string, error) {
	for _, k := range keys {
		sub, ok, err := t.sub(k)
		if err != nil {
			return tree{}, "", err
		}
		if ok {
			return sub, k, nil
		}
	}
	return tree{}, "", nil
}

// get follows a dotted key.
func (t tree) get(key string) (any, bool) {
	var cur any = t.m
	for _, seg := range strings.Split(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[seg]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

// number returns the first of keys present as a float64.
func (t tree) number(keys ...string) (float64, bool, error) {
	for _, k := range keys {
		v, ok := t.get(k)
		if !ok || v == nil {
			continue
		}
		f, err := thread.Number(v)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %s: %w", t.path, k, err)
		}
		return f, true, nil
	}
	return 0, false, nil
}

// integer returns the first of keys present as an int.
func (t tree) integer(keys ...string) (int, bool, error) {
	for _, k := range keys {
		f, ok, err := t.number(k)
		if err != nil || !ok {
			if err != nil {
				return 0, false, err
			}
			continue
		}
		if f != math.Trunc(f) {
			return 0, false, fmt.Errorf("%s: %s: %g is not an integer", t.path, k, f)
		}
		return int(f), true, nil
	}
	return 0, false, nil
}

// str returns the first of keys present as a string.
func (t tree) str(keys ...string) (string, bool, error) {
	for _, k := range keys {
		v, ok := t.get(k)
		if !ok || v == nil {
			continue
		}
		switch s := v.(type) {
		case string:
			return s, true, nil
		default:
			return "", false, fmt.Errorf("%s: %s: %v is not a string", t.path, k, v)
		}
	}
	return "", false, nil
}

// setting reads one optional value of a file's tree into its field.
type setting func(t tree) error

// read applies settings in order; the first error stops the rest.
func (t tree) read(settings ...setting) error {
	for _, set := range settings {
		if err := set(t); err != nil {
			return err
		}
	}
	return nil
}

// bounded reads the first of keys present with get and holds it to valid:
// a value it refuses is an error naming the file, then bad, a format of
// the value ("trigger_threshold: %g is not in (0, 1]").
func bounded[T int | float64](get func(t tree, keys ...string) (T, bool, error), valid func(T) bool, bad string, keys []string, store func(T)) setting {
	return func(t tree) error {
		v, ok, err := get(t, keys...)
		if err != nil || !ok {
			return err
		}
		if !valid(v) {
			return fmt.Errorf("%s: "+bad, t.path, v)
		}
		store(v)
		return nil
	}
}

// number sets *dst to the number at the first of keys present (see bounded).
func number(dst *float64, valid func(float64) bool, bad string, keys ...string) setting {
	return bounded(tree.number, valid, bad, keys, func(f float64) { *dst = f })
}

// integer sets *dst to the integer at the first of keys present (see bounded).
func integer(dst *int, valid func(int) bool, bad string, keys ...string) setting {
	return bounded(tree.integer, valid, bad, keys, func(n int) { *dst = n })
}

// seconds sets *dst to the number of seconds at the first of keys present
// (see bounded).
func seconds(dst *time.Duration, valid func(float64) bool, bad string, keys ...string) setting {
	return bounded(tree.number, valid, bad, keys, func(f float64) { *dst = time.Duration(f * float64(time.Second)) })
}

// positive and notNegative are the bounds settings hold numbers to.
func positive[T int | float64](v T) bool    { return v > 0 }
func notNegative[T int | float64](v T) bool { return v >= 0 }
