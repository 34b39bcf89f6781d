// Command schemagen writes the JSON schemas that deploy's tests validate
// the Kubernetes manifests against with kubeconform, so that the tests need
// no network: Kubernetes' own OpenAPI definitions of the kinds the base
// uses (module k8s.io/kubernetes, api/openapi-spec/swagger.json) and KEDA's
// custom resource definitions (module github.com/kedacore/keda/v2,
// config/crd/bases), both fetched with `go mod download`.
//
// The schemas are strict, as kubeconform's -strict ones are: an object
// that lists its fields allows no others, so a misspelt field fails. An
// int-or-string field takes either, a quantity a string or a number, as
// the API server does. The layout is kubeconform's: one file per kind,
// named <kind>-<group>-<version>.json, the Kubernetes ones referring to a
// shared _definitions.json.
//
// Run it from deploy/ (go generate ./deploy) after changing the versions
// or kinds below.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The modules the schemas come from.
const (
	kubernetesModule = "k8s.io/kubernetes@v1.37.2"
	kedaModule       = "github.com/kedacore/keda/v2@v2.21.0"
)

// kinds are the resources of the deploy files.
var kinds = []struct{ apiVersion, kind string }{
	{"v1", "ConfigMap"},
	{"v1", "Secret"},
	{"v1", "Service"},
	{"apps/v1", "Deployment"},
	{"policy/v1", "PodDisruptionBudget"},
	{"keda.sh/v1alpha1", "ScaledObject"},
	{"keda.sh/v1alpha1", "TriggerAuthentication"},
}

type schema = map[string]any

func main() {
	out := flag.String("out", "testdata/k8s-schemas", "directory to write the schemas to")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*out); err != nil {
		log.Fatal(err)
	}
}

func run(out string) error {
	k8sDir, err := download(kubernetesModule)
	if err != nil {
		return err
	}
	kedaDir, err := download(kedaModule)
	if err != nil {
		return err
	}
	var swagger struct{ Definitions map[string]schema }
	if err := readJSON(filepath.Join(k8sDir, "api", "openapi-spec", "swagger.json"), &swagger); err != nil {
		return err
	}
	defs := swagger.Definitions
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = schema{"oneOf": []any{schema{"type": "string"}, schema{"type": "number"}}}

	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	used := map[string]schema{}
	for _, k := range kinds {
		group, version, ok := strings.Cut(k.apiVersion, "/")
		if !ok {
			group, version = "", k.apiVersion
		}
		file := filepath.Join(out, fileName(k.kind, k.apiVersion))
		if group == "keda.sh" {
			crd, err := crdSchema(filepath.Join(kedaDir, "config", "crd", "bases"), group, version, k.kind)
			if err != nil {
				return err
			}
			strict(crd)
			if err := writeJSON(file, crd); err != nil {
				return err
			}
			continue
		}
		name, err := definitionOf(defs, group, version, k.kind)
		if err != nil {
			return err
		}
		closure(defs, name, used)
		if err := writeJSON(file, schema{"$ref": "_definitions.json#/definitions/" + name}); err != nil {
			return err
		}
	}
	for _, s := range used {
		strict(s)
	}
	return writeJSON(filepath.Join(out, "_definitions.json"), schema{"definitions": used})
}

// download fetches a module into the module cache and returns its
// directory.
func download(module string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = os.TempDir() // outside any module: go.mod and go.sum stay as they are
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if m.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", module, m.Error)
	}
	return m.Dir, nil
}

// fileName is kubeconform's schema file name for a kind
// ({{ .ResourceKind }}{{ .KindSuffix }}.json).
func fileName(kind, apiVersion string) string {
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return strings.ToLower(kind + "-" + apiVersion + ".json")
	}
	first, _, _ := strings.Cut(group, ".")
	return strings.ToLower(kind + "-" + first + "-" + version + ".json")
}

// definitionOf names the swagger definition of a group, version and kind.
func definitionOf(defs map[string]schema, group, version, kind string) (string, error) {
	for _, name := range slices.Sorted(maps.Keys(defs)) {
		gvks, _ := defs[name]["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			g, _ := g.(schema)
			if g["group"] == group && g["version"] == version && g["kind"] == kind {
				return name, nil
			}
		}
	}
	return "", fmt.Errorf("%s: no definition of %s/%s %s", kubernetesModule, group, version, kind)
}

// closure adds the definition name and every definition it refers to to
// used.
func closure(defs map[string]schema, name string, used map[string]schema) {
	if _, ok := used[name]; ok {
		return
	}
	used[name] = defs[name]
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case schema:
			if ref, ok := v["$ref"].(string); ok {
				closure(defs, strings.TrimPrefix(ref, "#/definitions/"), used)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(defs[name])
}

// crdSchema reads the OpenAPI schema of one version of a custom resource
// from the CRD files in dir.
func crdSchema(dir, group, version, kind string) (schema, error) {
	files, err := filepath.Glob(filepath.Join(dir, group+"_*.yaml"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		var crd struct {
			Spec struct {
				Group string
				Names struct{ Kind string }
				// Versions[].Schema.OpenAPIV3Schema
				Versions []struct {
					Name   string
					Schema struct {
						OpenAPIV3Schema schema `yaml:"openAPIV3Schema"`
					}
				}
			}
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if crd.Spec.Group != group || crd.Spec.Names.Kind != kind {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == version && v.Schema.OpenAPIV3Schema != nil {
				return v.Schema.OpenAPIV3Schema, nil
			}
		}
	}
	return nil, fmt.Errorf("%s: no CRD of %s/%s %s in %s", kedaModule, group, version, kind, dir)
}

// strict makes a schema strict in place: an object that lists its
// properties allows no others (unless it says it keeps unknown fields),
// and an int-or-string takes an integer or a string.
func strict(s schema) {
	if s == nil {
		return
	}
	if f, _ := s["format"].(string); f == "int-or-string" {
		delete(s, "format")
		delete(s, "type")
		s["oneOf"] = []any{schema{"type": "string"}, schema{"type": "integer"}}
	}
	if props, ok := s["properties"].(schema); ok {
		if _, has := s["additionalProperties"]; !has && s["x-kubernetes-preserve-unknown-fields"] != true {
			s["additionalProperties"] = false
		}
		for _, p := range props {
			strict(asSchema(p))
		}
	}
	strict(asSchema(s["additionalProperties"]))
	strict(asSchema(s["items"]))
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		l, _ := s[k].([]any)
		for _, x := range l {
			strict(asSchema(x))
		}
	}
}

func asSchema(v any) schema {
	s, _ := v.(schema)
	return s
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
