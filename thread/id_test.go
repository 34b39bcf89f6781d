package thread

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNewIDDistinct makes 10,000 ids from 50 goroutines within one second
// (the same epoch second for all of them) and requires them all distinct.
func TestNewIDDistinct(t *testing.T) {
	t.Parallel()
	const goroutines, per = 50, 200
	now := time.Unix(1739820456, 0)
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				ids[g] = append(ids[g], NewID("agency-kiwi/discover_leads", now))
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*per)
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
			if !strings.HasPrefix(id, "agency-kiwi/discover_leads-1739820456-") {
				t.Fatalf("id %q lacks the {directive}-{epoch}- prefix", id)
			}
		}
	}
	if len(seen) != goroutines*per {
		t.Fatalf("got %d ids, want %d", len(seen), goroutines*per)
	}
}

func TestDirectiveFromID(t *testing.T) {
	t.Parallel()
	tests := []struct{ id, want string }{
		{NewID("agency-kiwi/discover_leads", time.Unix(5, 0)), "agency-kiwi/discover_leads"},
		{NewID("test/hello", time.Now()), "test/hello"},
		{"nodash", ""},
		{"a-1", ""},
	}
	for _, tt := range tests {
		if got := DirectiveFromID(tt.id); got != tt.want {
			t.Errorf("DirectiveFromID(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}
