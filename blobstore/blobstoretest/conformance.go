// Package blobstoretest is the conformance suite every blobstore.Store
// backend must pass, so that the in-memory, local-directory and S3 backends
// cannot drift apart. Call Run from a backend's tests with a constructor that
// returns a fresh, empty store (a new temp dir, a new random S3 prefix).
package blobstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/spool-run/spool/blobstore"
)

// Run runs the conformance suite. newStore must return an empty store that
// no other test uses; it is called once per subtest, and subtests run in
// parallel.
func Run(t *testing.T, newStore func(t *testing.T) blobstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s blobstore.Store)
	}{
		{"PutGetOverwrite", testPutGetOverwrite},
		{"EmptyAndBinary", testEmptyAndBinary},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"Stat", testStat},
		{"List", testList},
		{"ListPagination", testListPagination},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"BadKeys", testBadKeys},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func mustPut(t *testing.T, s blobstore.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s blobstore.Store, key string) []byte {
	t.Helper()
	b, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return b
}

func keys(infos []blobstore.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.Key
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testPutGetOverwrite(t *testing.T, s blobstore.Store) {
	mustPut(t, s, "a/b/c.txt", []byte("one"))
	if got := mustGet(t, s, "a/b/c.txt"); string(got) != "one" {
		t.Fatalf("Get = %q, want %q", got, "one")
	}
	mustPut(t, s, "a/b/c.txt", []byte("two, longer"))
	if got := mustGet(t, s, "a/b/c.txt"); string(got) != "two, longer" {
		t.Fatalf("after overwrite Get = %q", got)
	}
	mustPut(t, s, "a/b/c.txt", []byte("3"))
	if got := mustGet(t, s, "a/b/c.txt"); string(got) != "3" {
		t.Fatalf("after shorter overwrite Get = %q", got)
	}
	const odd = "threads/test/hello-1739820456-k3j9qa/ü b+c=d,(1).jsonl"
	mustPut(t, s, odd, []byte("odd"))
	if got := mustGet(t, s, odd); string(got) != "odd" {
		t.Fatalf("Get(%q) = %q", odd, got)
	}
	// The returned slice is the caller's: mutating it changes nothing stored.
	got := mustGet(t, s, odd)
	got[0] = 'X'
	if again := mustGet(t, s, odd); string(again) != "odd" {
		t.Fatalf("stored object changed through a returned slice: %q", again)
	}
}

func testEmptyAndBinary(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	mustPut(t, s, "empty", nil)
	if got := mustGet(t, s, "empty"); len(got) != 0 {
		t.Fatalf("empty object Get = %d bytes", len(got))
	}
	if err := s.PutIfAbsent(ctx, "empty2", []byte{}); err != nil {
		t.Fatalf("PutIfAbsent empty: %v", err)
	}
	if in, err := s.Stat(ctx, "empty2"); err != nil || in.Size != 0 {
		t.Fatalf("Stat empty = %+v, %v", in, err)
	}
	bin := make([]byte, 0, 256*4+64<<10)
	for r := 0; r < 4; r++ {
		for i := 0; i < 256; i++ {
			bin = append(bin, byte(i))
		}
	}
	rnd := make([]byte, 64<<10)
	_, _ = rand.Read(rnd)
	bin = append(bin, rnd...)
	mustPut(t, s, "bin/data", bin)
	if got := mustGet(t, s, "bin/data"); !bytes.Equal(got, bin) {
		t.Fatalf("binary round trip differs (len %d vs %d)", len(got), len(bin))
	}
}

func testPutIfAbsent(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	if err := s.PutIfAbsent(ctx, "seg/000001.jsonl", []byte("first")); err != nil {
		t.Fatalf("first PutIfAbsent: %v", err)
	}
	err := s.PutIfAbsent(ctx, "seg/000001.jsonl", []byte("second"))
	if !errors.Is(err, blobstore.ErrExists) {
		t.Fatalf("second PutIfAbsent = %v, want ErrExists", err)
	}
	if got := mustGet(t, s, "seg/000001.jsonl"); string(got) != "first" {
		t.Fatalf("create-only write changed the object: %q", got)
	}
	// Put may replace; PutIfAbsent still refuses afterwards.
	mustPut(t, s, "seg/000001.jsonl", []byte("replaced"))
	if err := s.PutIfAbsent(ctx, "seg/000001.jsonl", nil); !errors.Is(err, blobstore.ErrExists) {
		t.Fatalf("PutIfAbsent after Put = %v, want ErrExists", err)
	}
	if err := s.Delete(ctx, "seg/000001.jsonl"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "seg/000001.jsonl", []byte("again")); err != nil {
		t.Fatalf("PutIfAbsent after Delete: %v", err)
	}
	if got := mustGet(t, s, "seg/000001.jsonl"); string(got) != "again" {
		t.Fatalf("Get = %q", got)
	}
	// A large body over an existing object (a bundle's content-addressed
	// blob, stored again on every run) is refused as any other, every
	// time: a server that answers 412 before reading the body must not
	// turn it into a reset connection.
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<16) // 4 MiB
	if err := s.PutIfAbsent(ctx, "blobs/big", big); err != nil {
		t.Fatalf("first large PutIfAbsent: %v", err)
	}
	for i := range 5 {
		if err := s.PutIfAbsent(ctx, "blobs/big", big); !errors.Is(err, blobstore.ErrExists) {
			t.Fatalf("large PutIfAbsent over an existing object (%d) = %v, want ErrExists", i, err)
		}
	}
}

func testPutIfAbsentRace(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	const n = 20
	for round := 0; round < 3; round++ {
		key := fmt.Sprintf("race/%d/seg.jsonl", round)
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.PutIfAbsent(ctx, key, []byte(fmt.Sprintf("writer-%02d", i)))
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: writers %d and %d both won", round, winner, i)
				}
				winner = i
			case errors.Is(err, blobstore.ErrExists):
			default:
				t.Fatalf("round %d: writer %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won", round)
		}
		if got, want := string(mustGet(t, s, key)), fmt.Sprintf("writer-%02d", winner); got != want {
			t.Fatalf("round %d: stored %q, winner wrote %q", round, got, want)
		}
	}
}

func testStat(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	mustPut(t, s, "x/one", []byte("hello"))
	mustPut(t, s, "x/two", []byte("hello"))
	mustPut(t, s, "x/three", []byte("world!"))
	one, err := s.Stat(ctx, "x/one")
	if err != nil {
		t.Fatal(err)
	}
	if one.Key != "x/one" || one.Size != 5 || one.Modified.IsZero() || one.ETag == "" {
		t.Fatalf("Stat = %+v", one)
	}
	two, _ := s.Stat(ctx, "x/two")
	three, _ := s.Stat(ctx, "x/three")
	if one.ETag != two.ETag {
		t.Fatalf("same content, different ETags %q %q", one.ETag, two.ETag)
	}
	if one.ETag == three.ETag || three.Size != 6 {
		t.Fatalf("different content: %+v vs %+v", one, three)
	}
	list, err := s.List(ctx, "x/one")
	if err != nil || len(list) != 1 {
		t.Fatalf("List(x/one) = %v, %v", list, err)
	}
	if list[0].Size != one.Size || list[0].ETag != one.ETag {
		t.Fatalf("List info %+v disagrees with Stat %+v", list[0], one)
	}
}

func testList(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	// No key is also a prefix directory of another ("a/b" and "a/b/c"):
	// a file system cannot hold both, and spool's layout never needs it.
	all := []string{"a/b/c", "a/b/d/e", "a/bb", "a/bc", "a/c", "b", "ba/x"}
	for i := len(all) - 1; i >= 0; i-- {
		mustPut(t, s, all[i], []byte(all[i]))
	}
	cases := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a/b/c", "a/b/d/e", "a/bb", "a/bc", "a/c", "b", "ba/x"}},
		{"a/", []string{"a/b/c", "a/b/d/e", "a/bb", "a/bc", "a/c"}},
		{"a/b", []string{"a/b/c", "a/b/d/e", "a/bb", "a/bc"}},
		{"a/b/", []string{"a/b/c", "a/b/d/e"}},
		{"a/b/d/e", []string{"a/b/d/e"}},
		{"b", []string{"b", "ba/x"}},
		{"b/", nil},
		{"zzz", nil},
		{"../", nil},
		{"a//", nil},
	}
	for _, c := range cases {
		got, err := s.List(ctx, c.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", c.prefix, err)
		}
		if !equalStrings(keys(got), c.want) {
			t.Errorf("List(%q) = %q, want %q", c.prefix, keys(got), c.want)
		}
		for _, in := range got {
			if in.Size != int64(len(in.Key)) {
				t.Errorf("List(%q): %s size %d, want %d", c.prefix, in.Key, in.Size, len(in.Key))
			}
		}
	}
}

func testListPagination(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	const n = 1100 // more than one S3 ListObjectsV2 page (1000)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("many/%05d.jsonl", i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for _, k := range want {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.PutIfAbsent(ctx, k, []byte("x")); err != nil {
				errs <- fmt.Errorf("%s: %w", k, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustPut(t, s, "manyother/x", []byte("x"))
	got, err := s.List(ctx, "many/")
	if err != nil {
		t.Fatal(err)
	}
	if !equalStrings(keys(got), want) {
		t.Fatalf("List(many/) returned %d keys, want %d sorted", len(got), n)
	}
}

func testDelete(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	mustPut(t, s, "d/1/x", []byte("x"))
	mustPut(t, s, "d/2", []byte("y"))
	if err := s.Delete(ctx, "d/1/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "d/1/x"); !errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "d/1/x"); err != nil {
		t.Fatalf("Delete of a missing key = %v, want nil", err)
	}
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("Delete of a never-written key = %v, want nil", err)
	}
	got, err := s.List(ctx, "d/")
	if err != nil || !equalStrings(keys(got), []string{"d/2"}) {
		t.Fatalf("List after Delete = %q, %v", keys(got), err)
	}
	// A deleted key can be written again, also below the pruned directory.
	mustPut(t, s, "d/1/x", []byte("z"))
	if got := mustGet(t, s, "d/1/x"); string(got) != "z" {
		t.Fatalf("Get = %q", got)
	}
}

func testNotFound(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	mustPut(t, s, "nf/a/b", []byte("x"))
	for _, k := range []string{"missing", "nf/a", "nf/a/b/c", "nf/a/bb"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", k, err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, blobstore.ErrNotFound) {
			t.Errorf("Stat(%q) = %v, want ErrNotFound", k, err)
		}
	}
}

func testBadKeys(t *testing.T, s blobstore.Store) {
	ctx := context.Background()
	bad := []string{"", "/abs", "trailing/", "a//b", "a/../b", "../escape", "./a", "a/.", "back\\slash", "nul\x00byte", ".."}
	for _, k := range bad {
		checks := map[string]error{
			"Put":         s.Put(ctx, k, []byte("x")),
			"PutIfAbsent": s.PutIfAbsent(ctx, k, []byte("x")),
			"Delete":      s.Delete(ctx, k),
		}
		_, checks["Get"] = s.Get(ctx, k)
		_, checks["Stat"] = s.Stat(ctx, k)
		for op, err := range checks {
			if err == nil || errors.Is(err, blobstore.ErrNotFound) || errors.Is(err, blobstore.ErrExists) {
				t.Errorf("%s(%q) = %v, want a key validation error", op, k, err)
			}
		}
	}
	got, err := s.List(ctx, "")
	if err != nil || len(got) != 0 {
		t.Fatalf("bad keys wrote objects: %q, %v", keys(got), err)
	}
}
