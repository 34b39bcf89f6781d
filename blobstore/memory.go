package blobstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"
)

// Memory is an in-process Store for tests and the embedded mode's
// throw-away runs. It keeps everything in a map, with the keys also in a
// sorted slice so that List costs the size of its answer, not of the store.
type Memory struct {
	mu   sync.RWMutex
	objs map[string]memObj
	keys []string // sorted
}

type memObj struct {
	data []byte
	mod  time.Time
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{objs: map[string]memObj{}} }

var _ Store = (*Memory)(nil)

// Put stores a copy of data at key, replacing any object there.
func (m *Memory) Put(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	m.set(key, data)
	m.mu.Unlock()
	return nil
}

// set stores data at key; m.mu is held.
func (m *Memory) set(key string, data []byte) {
	if _, ok := m.objs[key]; !ok {
		i, _ := slices.BinarySearch(m.keys, key)
		m.keys = slices.Insert(m.keys, i, key)
	}
	m.objs[key] = memObj{data: append([]byte(nil), data...), mod: time.Now()}
}

// PutIfAbsent stores a copy of data at key, or returns ErrExists if an
// object is already there.
func (m *Memory) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok {
		return ErrExists
	}
	m.set(key, data)
	return nil
}

// Get returns a copy of the object at key, or ErrNotFound.
func (m *Memory) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	m.mu.RLock()
	o, ok := m.objs[key]
	m.mu.RUnlock()
	if !ok {
		return nil, ErrNotFound
	}
	return append([]byte(nil), o.data...), nil
}

// Stat returns the object's info (its ETag is the MD5 of its bytes), or
// ErrNotFound.
func (m *Memory) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	m.mu.RLock()
	o, ok := m.objs[key]
	m.mu.RUnlock()
	if !ok {
		return Info{}, ErrNotFound
	}
	return info(key, o), nil
}

func info(key string, o memObj) Info {
	sum := md5.Sum(o.data)
	return Info{Key: key, Size: int64(len(o.data)), Modified: o.mod, ETag: hex.EncodeToString(sum[:])}
}

// List returns every object whose key starts with prefix, sorted by key.
func (m *Memory) List(ctx context.Context, prefix string) ([]Info, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []Info
	i, _ := slices.BinarySearch(m.keys, prefix)
	for ; i < len(m.keys) && strings.HasPrefix(m.keys[i], prefix); i++ {
		out = append(out, info(m.keys[i], m.objs[m.keys[i]]))
	}
	return out, nil
}

// Delete removes the object at key; a missing key is not an error.
func (m *Memory) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	if _, ok := m.objs[key]; ok {
		delete(m.objs, key)
		i, _ := slices.BinarySearch(m.keys, key)
		m.keys = slices.Delete(m.keys, i, i+1)
	}
	m.mu.Unlock()
	return nil
}
