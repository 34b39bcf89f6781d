// Package config reads a project's agent configuration files: limit
// defaults, retry and child policies (resilience.yaml), continuation and
// wait settings (coordination.yaml) and the model tier map (models.yaml).
//
// Every loader reads from an fs.FS rooted at the project root, so the same
// code reads a project directory (os.DirFS) at enqueue and a directive
// bundle (directive.Bundle) in a worker. Each file is looked up first at
// .ai/config/agent/<name>.yaml (the spec's path) and then at
// .ai/config/<name>.yaml; a missing file yields the reference defaults, a
// malformed one a one-line error naming the file and key.
//
// The loaders are tolerant of layout: a file's keys may sit at the top level
// or under a key named after the file (resilience:, coordination:), and each
// type documents the keys it accepts. Unknown keys are ignored so that
// reference-system files read unchanged.
//
// This is a separate package from directive because workers need it for
// threads whose directive comes from the system space, and because
// hooks.Builtin takes its RetryPolicy; it depends only on thread.
package config
