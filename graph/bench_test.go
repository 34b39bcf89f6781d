package graph

import (
	"os"
	"path/filepath"
	"testing"
)

func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "pr_review.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Parse("review/pr_review", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValue(b *testing.B) {
	scope := testScope()
	v := map[string]any{"a": "${state.files[0].path}", "b": "repo ${inputs.repo} has ${state.count | json} files", "c": "${state.nope || \"d\"}"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Value(v, scope); err != nil {
			b.Fatal(err)
		}
	}
}
