package directive

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ValidateFiles parses every directive file named in paths (a directory
// stands for every .md file below it) and returns one error per bad file
// (nil when all are valid). It is `spool directive validate PATH...`.
// Besides the parse itself it checks that the <directive>'s name matches
// its file (CheckName, FileName), that it has a version, that each
// declared input default has the declared type, and that declared outputs
// have distinct names.
func ValidateFiles(paths []string) []error {
	var errs []error
	for _, r := range ValidatePaths(paths) {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return errs
}

// FileResult is one file's validation: its directive, or why it is not
// valid (Directive nil). A path that holds no directive file is a
// FileResult with only an error.
type FileResult struct {
	Path      string
	Directive *Directive
	Err       error
}

// ValidatePaths is ValidateFiles with every file's result, valid or not,
// in the order found.
func ValidatePaths(paths []string) []FileResult {
	var out []FileResult
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			out = append(out, FileResult{Path: p, Err: fmt.Errorf("%s: %w", p, err)})
			continue
		}
		if !st.IsDir() {
			d, err := validateFile(p)
			out = append(out, FileResult{Path: p, Directive: d, Err: err})
			continue
		}
		found := false
		werr := filepath.WalkDir(p, func(q string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() || !strings.HasSuffix(q, ".md") {
				return nil
			}
			found = true
			d, err := validateFile(q)
			out = append(out, FileResult{Path: q, Directive: d, Err: err})
			return nil
		})
		if werr != nil {
			out = append(out, FileResult{Path: p, Err: fmt.Errorf("%s: %w", p, werr)})
		} else if !found {
			out = append(out, FileResult{Path: p, Err: fmt.Errorf("%s: no .md directive files", p)})
		}
	}
	return out
}

// validateFile parses and checks file p; the directive is nil with an
// error.
func validateFile(p string) (*Directive, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	d, err := Parse(p, data)
	if err != nil {
		return nil, err
	}
	if err := CheckName(d, FileName(p)); err != nil {
		return nil, err
	}
	if err := Check(d); err != nil {
		return nil, err
	}
	return d, nil
}

// FileName is the directive name file p stands for: its path below
// .ai/directives/ without ".md" when it lies there ("test/limits/x"), else
// its base name without ".md".
func FileName(p string) string {
	slashed := filepath.ToSlash(p)
	if i := strings.LastIndex(slashed, DirectivesDir+"/"); i >= 0 && (i == 0 || slashed[i-1] == '/') {
		return strings.TrimSuffix(slashed[i+len(DirectivesDir)+1:], ".md")
	}
	return strings.TrimSuffix(path.Base(slashed), ".md")
}

// CheckName refuses a directive whose name attribute names neither the
// file it is in nor its path below .ai/directives: name is the directive
// name it was found under ("test/limits/depth_child"), and d's name must
// be that or its last element ("depth_child"), as the reference requires.
// A copied file whose name was not changed would otherwise run as what it
// was copied from in every record, event and log.
func CheckName(d *Directive, name string) error {
	name = strings.TrimSuffix(name, ".md")
	if d.Name == name || d.Name == path.Base(name) {
		return nil
	}
	return &ParseError{Path: d.Path, Elem: fmt.Sprintf("<directive name=%q>", d.Name),
		Msg: fmt.Sprintf("the name does not match the file: want name=%q (the file is %s.md)", path.Base(name), name)}
}

// Check runs ValidateFiles' checks beyond the parse on d.
func Check(d *Directive) error {
	if d.Version == "" {
		return &ParseError{Path: d.Path, Elem: fmt.Sprintf("<directive name=%q>", d.Name), Msg: "missing version attribute"}
	}
	for _, in := range d.Inputs {
		if in.Default == nil {
			continue
		}
		if _, err := coerce(in.Type, *in.Default); err != nil {
			return &ParseError{Path: d.Path, Elem: fmt.Sprintf("<input name=%q default=%q>", in.Name, *in.Default), Msg: err.Error()}
		}
	}
	seen := map[string]bool{}
	for _, f := range d.Outputs.Fields {
		if seen[f.Name] {
			return &ParseError{Path: d.Path, Elem: fmt.Sprintf("<output name=%q>", f.Name), Msg: "declared twice"}
		}
		seen[f.Name] = true
	}
	return nil
}
