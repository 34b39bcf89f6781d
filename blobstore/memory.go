package blobstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
	"time"
)

// Memory is an in-process Store for tests and the embedded mode's
// throw-away runs. It keeps everything in a map.
type Memory struct {
	mu   sync.RWMutex
	objs map[string]memObj
}

type memObj struct {
	data []byte
	mod  time.Time
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{objs: map[string]memObj{}} }

var _ Store = (*Memory)(nil)

func (m *Memory) Put(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	m.objs[key] = memObj{data: append([]byte(nil), data...), mod: time.Now()}
	m.mu.Unlock()
	return nil
}

func (m *Memory) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[key]; ok {
		return ErrExists
	}
	m.objs[key] = memObj{data: append([]byte(nil), data...), mod: time.Now()}
	return nil
}

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

func (m *Memory) List(ctx context.Context, prefix string) ([]Info, error) {
	m.mu.RLock()
	var out []Info
	for k, o := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, info(k, o))
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *Memory) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.objs, key)
	m.mu.Unlock()
	return nil
}
