package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/stretchr/testify/require"
)

// obj is one decoded YAML mapping; manifests are handled generically so that
// negative tests can mutate them freely.
type obj = map[string]any

// doc is one document of a (possibly multi-document) YAML file.
type doc struct {
	File  string
	Index int
	Obj   obj
}

func (d doc) kind() string { return str(d.Obj, "kind") }
func (d doc) name() string { return str(d.Obj, "metadata", "name") }
func (d doc) String() string {
	return fmt.Sprintf("%s %s (%s#%d)", d.kind(), d.name(), filepath.Base(d.File), d.Index)
}

// parseDocs decodes every document of a YAML stream. Empty documents are
// skipped; a document that is not a mapping is an error.
func parseDocs(file string, data []byte) ([]doc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []doc
	for i := 0; ; i++ {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if v == nil {
			continue
		}
		m, ok := v.(obj)
		if !ok {
			return nil, fmt.Errorf("%s: document %d is a %T, want a mapping", file, i, v)
		}
		docs = append(docs, doc{File: file, Index: i, Obj: m})
	}
}

func readDocs(file string) ([]doc, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return parseDocs(file, data)
}

// get walks a path of map keys (string) and list indexes (int).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k < 0 || k >= len(l) {
				return nil
			}
			v = l[k]
		default:
			panic(fmt.Sprintf("bad path element %T", p))
		}
	}
	return v
}

func str(v any, path ...any) string {
	switch s := get(v, path...).(type) {
	case string:
		return s
	case nil:
		return ""
	default:
		return fmt.Sprint(s)
	}
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func mapping(v any, path ...any) obj {
	m, _ := get(v, path...).(obj)
	return m
}

// intOf reads an int field; ok is false when it is missing or not an int.
func intOf(v any, path ...any) (int, bool) {
	n, ok := get(v, path...).(int)
	return n, ok
}

// containerPath is the path of field more (none: the container itself)
// of a workload's first container.
func containerPath(more ...any) []any {
	return append([]any{"spec", "template", "spec", "containers", 0}, more...)
}

// set replaces the value at path (the parent must exist); for mutations in
// negative tests.
func set(t *testing.T, v any, value any, path ...any) {
	t.Helper()
	parent := get(v, path[:len(path)-1]...)
	switch k := path[len(path)-1].(type) {
	case string:
		m, ok := parent.(obj)
		require.True(t, ok, "set %v: parent is %T", path, parent)
		if value == nil {
			delete(m, k)
		} else {
			m[k] = value
		}
	case int:
		l, ok := parent.([]any)
		require.True(t, ok, "set %v: parent is %T", path, parent)
		require.Less(t, k, len(l), "set %v: parent is %T", path, parent)
		l[k] = value
	}
}

// parseEnvFile reads KEY=VALUE lines (kustomize "envs" format): blank lines
// and # comments are skipped.
func parseEnvFile(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=VALUE, got %q", n, line)
		}
		out[k] = v
	}
	return out, sc.Err()
}

// kbase is a loaded kustomize base: its kustomization, the documents of its
// resources, and the Secrets its secretGenerator makes (name -> keys).
type kbase struct {
	Dir           string
	Kustomization obj
	Docs          []doc
	Secrets       map[string]map[string]bool
}

// secretSource maps a generator source to the file that holds its content
// here: the real file if present, else the committed "<file>.example".
func secretSource(dir, rel string) (string, error) {
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if _, err := os.Stat(p + ".example"); err == nil {
		return p + ".example", nil
	}
	return "", fmt.Errorf("secretGenerator source %s: neither it nor %s.example exists", rel, rel)
}

// generatorFileKey is the Secret key of a secretGenerator "files" entry:
// "key=path", or the file's base name.
func generatorFileKey(entry string) string {
	if key, _, ok := strings.Cut(entry, "="); ok {
		return key
	}
	return filepath.Base(entry)
}

// generatorFilePath is the source path of a "files" entry.
func generatorFilePath(entry string) string {
	if _, p, ok := strings.Cut(entry, "="); ok {
		return p
	}
	return entry
}

// loadBase reads dir/kustomization.yaml and the files it lists.
func loadBase(dir string) (*kbase, error) {
	kdocs, err := readDocs(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	if len(kdocs) != 1 {
		return nil, fmt.Errorf("kustomization.yaml: %d documents, want 1", len(kdocs))
	}
	b := &kbase{Dir: dir, Kustomization: kdocs[0].Obj, Secrets: map[string]map[string]bool{}}
	if probs := checkKustomizationFiles(dir, b.Kustomization); len(probs) > 0 {
		return nil, errors.New(strings.Join(probs, "; "))
	}
	for _, r := range list(b.Kustomization, "resources") {
		docs, err := readDocs(filepath.Join(dir, r.(string)))
		if err != nil {
			return nil, err
		}
		b.Docs = append(b.Docs, docs...)
	}
	for _, g := range list(b.Kustomization, "secretGenerator") {
		name := str(g, "name")
		keys := map[string]bool{}
		for _, f := range list(g, "files") {
			keys[generatorFileKey(f.(string))] = true
		}
		for _, e := range list(g, "envs") {
			p, err := secretSource(dir, e.(string))
			if err != nil {
				return nil, err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			kv, err := parseEnvFile(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			for k := range kv {
				keys[k] = true
			}
		}
		for _, l := range list(g, "literals") {
			k, _, _ := strings.Cut(l.(string), "=")
			keys[k] = true
		}
		b.Secrets[name] = keys
	}
	for _, d := range b.Docs {
		if d.kind() != "Secret" {
			continue
		}
		keys := map[string]bool{}
		for _, field := range []string{"data", "stringData"} {
			for k := range mapping(d.Obj, field) {
				keys[k] = true
			}
		}
		b.Secrets[d.name()] = keys
	}
	return b, nil
}

// byKind returns the documents of one kind.
func byKind(docs []doc, kind string) []doc {
	var out []doc
	for _, d := range docs {
		if d.kind() == kind {
			out = append(out, d)
		}
	}
	return out
}

func find(docs []doc, kind, name string) (doc, bool) {
	for _, d := range docs {
		if d.kind() == kind && d.name() == name {
			return d, true
		}
	}
	return doc{}, false
}

// flagValue returns the value of --name in args ("--name=v" or "--name v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func stringsOf(l []any) []string {
	out := make([]string, 0, len(l))
	for _, v := range l {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// parseQueues parses the worker's --queues value ("critical=6,default=3")
// into its queue names, in order.
func parseQueues(v string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		name, weight, ok := strings.Cut(part, "=")
		if !ok || name == "" || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(weight) {
			return nil, fmt.Errorf("queue %q: want name=positive-weight", part)
		}
		if seen[name] {
			return nil, fmt.Errorf("queue %q listed twice", name)
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
