package directive

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ValidateFiles parses every directive file named in paths (a directory
// stands for every .md file below it) and returns one error per bad file
// (nil when all are valid). It is `spool directive validate PATH...`.
// Besides the parse itself it checks that the <directive> has a version,
// that each declared input default has the declared type, and that
// declared outputs have distinct names.
func ValidateFiles(paths []string) []error {
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		if !st.IsDir() {
			if err := validateFile(p); err != nil {
				errs = append(errs, err)
			}
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
			if err := validateFile(q); err != nil {
				errs = append(errs, err)
			}
			return nil
		})
		if werr != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, werr))
		} else if !found {
			errs = append(errs, fmt.Errorf("%s: no .md directive files", p))
		}
	}
	return errs
}

func validateFile(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	d, err := Parse(p, data)
	if err != nil {
		return err
	}
	return Check(d)
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
