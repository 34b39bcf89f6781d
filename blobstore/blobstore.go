// Package blobstore is spool's store for large, cold state: directive
// bundles, transcript segments, checkpoints, thread.json, knowledge renders
// and tool artifacts. One small interface, two backends: S3-compatible
// storage (aws-sdk-go-v2) and a local directory.
package blobstore

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by Get, Stat and Delete-tolerant callers when a key
// does not exist.
var ErrNotFound = errors.New("blob not found")

// ErrExists is returned by PutIfAbsent when the key already exists.
var ErrExists = errors.New("blob already exists")

// ErrSymlink is the error of a Local operation whose path holds a symbolic
// link (planted in the store's directory by something other than the
// store, which never makes one): the local store never follows one.
var ErrSymlink = errors.New("a component of the path is a symlink, which the local store never follows")

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
	ETag     string
}

// ViewWriter is implemented by stores that can write a view more cheaply
// than a record. A view is an object that can be rebuilt from records held
// elsewhere (a render of a transcript, a copy of registry state); a store may
// lose a view in a machine crash but never tears it. The local directory
// skips fsync for views; S3 writes them like any object.
type ViewWriter interface {
	PutView(ctx context.Context, key string, data []byte) error
}

// PutView writes a view through ViewWriter when the store has it, else Put.
func PutView(ctx context.Context, s Store, key string, data []byte) error {
	if v, ok := s.(ViewWriter); ok {
		return v.PutView(ctx, key, data)
	}
	return s.Put(ctx, key, data)
}

// Store is the blob store. Keys are slash-separated paths without a leading
// slash ("threads/<id>/transcript/00000001.jsonl"; package blobkey builds
// spool's). Implementations are safe for concurrent use.
type Store interface {
	// Put writes data at key, replacing any object there.
	Put(ctx context.Context, key string, data []byte) error
	// PutIfAbsent writes data at key only if no object exists there;
	// otherwise it returns ErrExists and changes nothing.
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	// Get returns the object's bytes, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Stat returns the object's info, or ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// List returns every object whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes the object; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
}
