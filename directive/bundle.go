package directive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	simplelru "github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sync/errgroup"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// Bundle layout in the blob store (package blobkey builds the keys):
//
//	bundles/blobs/<sha256 of content>      one object per distinct file
//	bundles/<sha256 of manifest>.json      the manifest; its hash is the digest
//
// Paths inside a bundle are relative to the project root
// (".ai/directives/x.md"); the user space is under UserPrefix
// ("~user/.ai/directives/x.md", "~user/.ai/config/agent/hooks.yaml").
// Extra files (e.g. the scripted provider's script) are kept apart from the
// tree and read with Extra.
const (
	// UserPrefix is the bundle directory holding the user space.
	UserPrefix = "~user"
	// MaxBundleFile bounds one file in a bundle.
	MaxBundleFile = 32 << 20
	// maxParallel bounds concurrent blob-store calls of one bundle.
	maxParallel = 8
)

// ProjectBundleDirs are the project directories a bundle snapshots.
var ProjectBundleDirs = []string{".ai/directives", ".ai/knowledge", ".ai/config", ".ai/tools", ".ai/graphs"}

// UserBundleFiles are the user-space items a bundle snapshots: user
// directives and graphs, and the user hooks file.
var UserBundleFiles = []string{".ai/directives", ".ai/graphs", ".ai/config/agent/hooks.yaml", ".ai/config/hooks.yaml"}

// ErrBadBundle is wrapped by errors about a corrupt or tampered bundle.
var ErrBadBundle = errors.New("bad bundle")

type manifestEntry struct {
	Digest string      `json:"digest"`
	Mode   fs.FileMode `json:"mode"`
	Size   int64       `json:"size"`
}

type manifest struct {
	Version int                      `json:"version"`
	Files   map[string]manifestEntry `json:"files"`
	Extra   map[string]manifestEntry `json:"extra,omitempty"`
}

type pending struct {
	path string
	mode fs.FileMode
	data []byte
}

// BuildBundle snapshots the items a thread may load into the blob store
// and returns the bundle digest (64 hex digits): the project's
// .ai/directives, .ai/knowledge, .ai/config and .ai/tools trees (keeping
// permission bits, so executables stay executable), the user space's
// directives and hooks.yaml (userDir is the user's home; "" skips it), and
// extra named files. Blobs and manifests are written with PutIfAbsent, so
// identical content is stored once and building twice gives the same
// digest. Missing directories are skipped; symlinks to files are followed,
// to directories are not.
func BuildBundle(ctx context.Context, store blobstore.Store, projectDir, userDir string, extra map[string][]byte) (string, error) {
	var files []pending
	if projectDir != "" {
		for _, d := range ProjectBundleDirs {
			got, err := collect(projectDir, d, "")
			if err != nil {
				return "", err
			}
			files = append(files, got...)
		}
	}
	if userDir != "" {
		for _, d := range UserBundleFiles {
			got, err := collect(userDir, d, UserPrefix)
			if err != nil {
				return "", err
			}
			files = append(files, got...)
		}
	}
	return storeBundle(ctx, store, files, extra)
}

// CopyTo stores b in store with the extra files added (replacing extras of
// the same name) and returns the digest of the copy: what BuildBundle of
// the same project and extras would return. A replay (package history)
// runs a recorded thread's bundle in its scratch store with the script it
// plays.
func (b *Bundle) CopyTo(ctx context.Context, store blobstore.Store, extra map[string][]byte) (string, error) {
	files := make([]pending, 0, len(b.files))
	for p, f := range b.files {
		files = append(files, pending{path: p, mode: f.mode, data: f.data})
	}
	all := make(map[string][]byte, len(b.extra)+len(extra))
	for name, data := range b.extra {
		all[name] = data
	}
	for name, data := range extra {
		all[name] = data
	}
	return storeBundle(ctx, store, files, all)
}

// storeBundle writes files and extras to store as a bundle and returns its
// digest.
func storeBundle(ctx context.Context, store blobstore.Store, files []pending, extra map[string][]byte) (string, error) {
	m := manifest{Version: 1, Files: map[string]manifestEntry{}}
	blobs := map[string][]byte{}
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		dg := hex.EncodeToString(sum[:])
		m.Files[f.path] = manifestEntry{Digest: dg, Mode: f.mode.Perm(), Size: int64(len(f.data))}
		blobs[dg] = f.data
	}
	for name, data := range extra {
		if name == "" {
			return "", fmt.Errorf("bundle: extra file with empty name")
		}
		if m.Extra == nil {
			m.Extra = map[string]manifestEntry{}
		}
		sum := sha256.Sum256(data)
		dg := hex.EncodeToString(sum[:])
		m.Extra[name] = manifestEntry{Digest: dg, Size: int64(len(data))}
		blobs[dg] = data
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallel)
	for dg, data := range blobs {
		g.Go(func() error {
			return putOnce(gctx, store, blobkey.BundleBlob(dg), data)
		})
	}
	if err := g.Wait(); err != nil {
		return "", fmt.Errorf("bundle: store blobs: %w", err)
	}
	mb, err := json.Marshal(m) // map keys are sorted: the same tree gives the same bytes
	if err != nil {
		return "", fmt.Errorf("bundle: encode manifest: %w", err)
	}
	sum := sha256.Sum256(mb)
	digest := hex.EncodeToString(sum[:])
	if err := putOnce(ctx, store, blobkey.Bundle(digest), mb); err != nil {
		return "", fmt.Errorf("bundle: store manifest: %w", err)
	}
	return digest, nil
}

func putOnce(ctx context.Context, store blobstore.Store, key string, data []byte) error {
	err := store.PutIfAbsent(ctx, key, data)
	if errors.Is(err, blobstore.ErrExists) {
		return nil
	}
	return err
}

// collect reads every regular file under root/rel (a directory or a single
// file), naming each prefix/rel/... with forward slashes.
func collect(root, rel, prefix string) ([]pending, error) {
	base := filepath.Join(root, filepath.FromSlash(rel))
	st, err := os.Stat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	c := collector{root: root, prefix: prefix}
	if st.IsDir() {
		return c.walk(base)
	}
	if !st.Mode().IsRegular() {
		return nil, nil
	}
	f, err := c.read(base, st.Mode(), st.Size())
	if err != nil {
		return nil, err
	}
	return []pending{f}, nil
}

// collector reads the files of one root for collect, naming them by their
// path from root under prefix.
type collector struct {
	root, prefix string
}

// walk reads every regular file under the directory base, following
// symlinks to files (a dangling one is skipped) and not to directories.
func (c collector) walk(base string) ([]pending, error) {
	var out []pending
	err := filepath.WalkDir(base, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		if de.IsDir() {
			return nil
		}
		info, err := os.Stat(p) // follows file symlinks
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // dangling symlink
				return nil
			}
			return fmt.Errorf("bundle: %w", err)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := c.read(p, info.Mode(), info.Size())
		if err != nil {
			return err
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// read reads the file p, of the given mode and size, which must be within
// MaxBundleFile.
func (c collector) read(p string, mode fs.FileMode, size int64) (pending, error) {
	if size > MaxBundleFile {
		return pending{}, fmt.Errorf("bundle: %s: %d bytes is over the %d byte limit", p, size, MaxBundleFile)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return pending{}, fmt.Errorf("bundle: %w", err)
	}
	n, err := c.name(p)
	if err != nil {
		return pending{}, err
	}
	return pending{path: n, mode: mode, data: data}, nil
}

// name is the bundle path of the file p: its path from the root, with
// forward slashes, under the prefix.
func (c collector) name(p string) (string, error) {
	r, err := filepath.Rel(c.root, p)
	if err != nil {
		return "", err
	}
	r = filepath.ToSlash(r)
	if c.prefix != "" {
		r = c.prefix + "/" + r
	}
	if !fs.ValidPath(r) {
		return "", fmt.Errorf("bundle: bad path %q", r)
	}
	return r, nil
}

// Bundle is a loaded, verified directive bundle. It implements fs.FS,
// fs.ReadFileFS, fs.ReadDirFS and fs.StatFS over the project tree (see
// the layout above); it is immutable and safe for concurrent use.
type Bundle struct {
	Digest string
	files  map[string]*bundleFile
	dirs   map[string][]fs.DirEntry
	extra  map[string][]byte
	size   int64
}

type bundleFile struct {
	name string // base name
	data []byte
	mode fs.FileMode
}

// LoadBundle loads bundle digest from store through DefaultBundleCache.
func LoadBundle(ctx context.Context, store blobstore.Store, digest string) (*Bundle, error) {
	return DefaultBundleCache.Load(ctx, store, digest)
}

func validDigest(d string) bool {
	if len(d) != 64 {
		return false
	}
	_, err := hex.DecodeString(d)
	return err == nil && strings.ToLower(d) == d
}

// fetchBundle fetches bundle digest from store and verifies it: its
// manifest, each of its blobs against its digest, and its tree.
func fetchBundle(ctx context.Context, store blobstore.Store, digest string) (*Bundle, error) {
	m, err := fetchManifest(ctx, store, digest)
	if err != nil {
		return nil, err
	}
	blobs, err := fetchBlobs(ctx, store, m)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", digest, err)
	}
	b, err := newBundle(digest, m, blobs)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", digest, err)
	}
	return b, nil
}

// fetchManifest fetches the manifest of bundle digest and verifies it:
// its hash is the digest, it decodes, its version is 1 and its paths are
// valid.
func fetchManifest(ctx context.Context, store blobstore.Store, digest string) (manifest, error) {
	var m manifest
	if !validDigest(digest) {
		return m, fmt.Errorf("bundle %q: not a sha256 hex digest: %w", digest, ErrBadBundle)
	}
	mb, err := store.Get(ctx, blobkey.Bundle(digest))
	if err != nil {
		return m, fmt.Errorf("bundle %s: manifest: %w", digest, err)
	}
	if sum := sha256.Sum256(mb); hex.EncodeToString(sum[:]) != digest {
		return m, fmt.Errorf("bundle %s: manifest hash mismatch: %w", digest, ErrBadBundle)
	}
	if err := json.Unmarshal(mb, &m); err != nil {
		return m, fmt.Errorf("bundle %s: manifest: %w: %w", digest, err, ErrBadBundle)
	}
	if m.Version != 1 {
		return m, fmt.Errorf("bundle %s: manifest version %d: %w", digest, m.Version, ErrBadBundle)
	}
	for p := range m.Files {
		if !fs.ValidPath(p) || p == "." {
			return m, fmt.Errorf("bundle %s: bad path %q: %w", digest, p, ErrBadBundle)
		}
	}
	return m, nil
}

// fetchBlobs fetches the blobs of m's files and extras, each distinct one
// once and at most maxParallel at a time, by their digests.
func fetchBlobs(ctx context.Context, store blobstore.Store, m manifest) (map[string][]byte, error) {
	need := map[string]bool{}
	for _, e := range m.Files {
		need[e.Digest] = true
	}
	for _, e := range m.Extra {
		need[e.Digest] = true
	}
	var mu sync.Mutex
	blobs := map[string][]byte{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallel)
	for dg := range need {
		g.Go(func() error {
			data, err := fetchBlob(gctx, store, dg)
			if err != nil {
				return err
			}
			mu.Lock()
			blobs[dg] = data
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return blobs, nil
}

// fetchBlob fetches the blob dg and verifies that dg is its hash.
func fetchBlob(ctx context.Context, store blobstore.Store, dg string) ([]byte, error) {
	if !validDigest(dg) {
		return nil, fmt.Errorf("bad blob digest %q: %w", dg, ErrBadBundle)
	}
	data, err := store.Get(ctx, blobkey.BundleBlob(dg))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", dg, err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != dg {
		return nil, fmt.Errorf("blob %s: hash mismatch: %w", dg, ErrBadBundle)
	}
	return data, nil
}

// newBundle assembles bundle digest from its manifest m and the blobs it
// names: its files, the listing of every directory they make, and its
// extras.
func newBundle(digest string, m manifest, blobs map[string][]byte) (*Bundle, error) {
	b := &Bundle{Digest: digest, files: map[string]*bundleFile{}, dirs: map[string][]fs.DirEntry{}, extra: map[string][]byte{}}
	t := bundleTree{b: b, listed: map[string]map[string]bool{".": {}}}
	for p, e := range m.Files {
		if err := t.addFile(p, &bundleFile{name: path.Base(p), data: blobs[e.Digest], mode: e.Mode.Perm()}); err != nil {
			return nil, err
		}
	}
	if err := t.finish(); err != nil {
		return nil, err
	}
	for name, e := range m.Extra {
		b.extra[name] = blobs[e.Digest]
		b.size += int64(len(blobs[e.Digest]))
	}
	return b, nil
}

// bundleTree builds the directory listings of a Bundle as its files are
// added.
type bundleTree struct {
	b      *Bundle
	listed map[string]map[string]bool // the names in each directory's listing
}

// addFile adds the file f at p, and lists it in its directory and each
// directory in that one's. A directory on the way that is a file is an
// error.
func (t *bundleTree) addFile(p string, f *bundleFile) error {
	t.b.files[p] = f
	t.b.size += int64(len(f.data))
	t.list(path.Dir(p), fs.FileInfoToDirEntry(f.info()))
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if _, clash := t.b.files[d]; clash {
			return fmt.Errorf("%q is both a file and a directory: %w", d, ErrBadBundle)
		}
		t.list(path.Dir(d), fs.FileInfoToDirEntry(dirInfo(path.Base(d))))
	}
	return nil
}

// list adds e to the listing of dir, unless a name of e's is listed there
// already.
func (t *bundleTree) list(dir string, e fs.DirEntry) {
	if t.listed[dir] == nil {
		t.listed[dir] = map[string]bool{}
	}
	if !t.listed[dir][e.Name()] {
		t.listed[dir][e.Name()] = true
		t.b.dirs[dir] = append(t.b.dirs[dir], e)
	}
}

// finish checks, once every file is added, that no directory is also a
// file, sorts each listing by name, and gives the root one (empty in an
// empty bundle).
func (t *bundleTree) finish() error {
	b := t.b
	for d := range b.dirs {
		if _, clash := b.files[d]; clash {
			return fmt.Errorf("%q is both a file and a directory: %w", d, ErrBadBundle)
		}
		sort.Slice(b.dirs[d], func(i, j int) bool { return b.dirs[d][i].Name() < b.dirs[d][j].Name() })
	}
	if _, ok := b.dirs["."]; !ok {
		b.dirs["."] = nil
	}
	return nil
}

// Extra returns the extra file stored under name at build time.
func (b *Bundle) Extra(name string) ([]byte, bool) {
	data, ok := b.extra[name]
	if !ok {
		return nil, false
	}
	return bytes.Clone(data), true
}

// Paths returns every file path in the bundle, sorted.
func (b *Bundle) Paths() []string {
	out := make([]string, 0, len(b.files))
	for p := range b.files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Size is the total bytes of the bundle's files and extras.
func (b *Bundle) Size() int64 { return b.size }

// UserFS is the user space (rooted at the user's home) inside the bundle.
func (b *Bundle) UserFS() fs.FS {
	sub, _ := fs.Sub(b, UserPrefix)
	return sub
}

// Resolver resolves directives over the bundle: project, then user, then
// the system space built into the binary.
func (b *Bundle) Resolver() *Resolver {
	return &Resolver{Spaces: []Space{
		SpaceAt(SpaceProject, b, "."),
		SpaceAt(SpaceUser, b, UserPrefix),
		SystemSpace(),
	}}
}

// Open implements fs.FS.
func (b *Bundle) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if f, ok := b.files[name]; ok {
		return &openFile{f: f, r: bytes.NewReader(f.data)}, nil
	}
	if ents, ok := b.dirs[name]; ok {
		return &openDir{name: path.Base(name), entries: ents}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

// ReadFile implements fs.ReadFileFS; the result is a copy.
func (b *Bundle) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrInvalid}
	}
	f, ok := b.files[name]
	if !ok {
		if _, isDir := b.dirs[name]; isDir {
			return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
		}
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return bytes.Clone(f.data), nil
}

// ReadDir implements fs.ReadDirFS.
func (b *Bundle) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	ents, ok := b.dirs[name]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return append([]fs.DirEntry(nil), ents...), nil
}

// Stat implements fs.StatFS.
func (b *Bundle) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	if f, ok := b.files[name]; ok {
		return f.info(), nil
	}
	if _, ok := b.dirs[name]; ok {
		return dirInfo(path.Base(name)), nil
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() fs.FileMode  { return i.mode }
func (i fileInfo) ModTime() time.Time { return time.Time{} }
func (i fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fileInfo) Sys() any           { return nil }

func (f *bundleFile) info() fs.FileInfo {
	return fileInfo{name: f.name, size: int64(len(f.data)), mode: f.mode}
}

func dirInfo(name string) fs.FileInfo {
	return fileInfo{name: name, mode: fs.ModeDir | 0o555}
}

type openFile struct {
	f *bundleFile
	r *bytes.Reader
}

func (o *openFile) Stat() (fs.FileInfo, error) { return o.f.info(), nil }
func (o *openFile) Read(p []byte) (int, error) { return o.r.Read(p) }
func (o *openFile) Close() error               { return nil }
func (o *openFile) Seek(off int64, whence int) (int64, error) {
	return o.r.Seek(off, whence)
}
func (o *openFile) ReadAt(p []byte, off int64) (int, error) { return o.r.ReadAt(p, off) }

type openDir struct {
	name    string
	entries []fs.DirEntry
	pos     int
}

func (d *openDir) Stat() (fs.FileInfo, error) { return dirInfo(d.name), nil }
func (d *openDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: errors.New("is a directory")}
}
func (d *openDir) Close() error { return nil }
func (d *openDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.pos:]
	if n <= 0 {
		d.pos = len(d.entries)
		return append([]fs.DirEntry(nil), rest...), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.pos += n
	return append([]fs.DirEntry(nil), rest[:n]...), nil
}

// BundleCache keeps recently loaded bundles by digest, least recently used
// evicted first (hashicorp/golang-lru), within a count and a total size.
// Bundles are content-addressed and verified, so one cache may serve
// several stores. Safe for concurrent use.
type BundleCache struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	lru      *simplelru.LRU[string, *Bundle] // nil: keeps nothing
}

// NewBundleCache bounds the cache by bundle count and total bytes (a
// bundle larger than maxBytes is returned but not kept).
func NewBundleCache(maxBundles int, maxBytes int64) *BundleCache {
	c := &BundleCache{maxBytes: maxBytes}
	if maxBundles > 0 {
		c.lru, _ = simplelru.NewLRU(maxBundles, func(_ string, b *Bundle) { c.bytes -= b.size })
	}
	return c
}

// DefaultBundleCache holds up to 64 bundles and 256 MiB.
var DefaultBundleCache = NewBundleCache(64, 256<<20)

// Load returns bundle digest, from the cache or the store.
func (c *BundleCache) Load(ctx context.Context, store blobstore.Store, digest string) (*Bundle, error) {
	if b := c.get(digest); b != nil {
		return b, nil
	}
	b, err := fetchBundle(ctx, store, digest)
	if err != nil {
		return nil, err
	}
	c.put(b)
	return b, nil
}

// Len is the number of cached bundles.
func (c *BundleCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return 0
	}
	return c.lru.Len()
}

func (c *BundleCache) get(digest string) *Bundle {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return nil
	}
	b, _ := c.lru.Get(digest)
	return b
}

func (c *BundleCache) put(b *Bundle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil || c.lru.Contains(b.Digest) || b.size > c.maxBytes {
		return
	}
	c.lru.Add(b.Digest, b) // past the count, evicts the oldest (and its bytes)
	c.bytes += b.size
	for c.bytes > c.maxBytes {
		c.lru.RemoveOldest()
	}
}
