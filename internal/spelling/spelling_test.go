package spelling

import (
	"strings"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"execute", "execute", 0},
		{"exeucte", "execute", 1}, // a transposition is one edit
		{"limts", "limits", 1},
		{"kitten", "sitting", 3},
		{"größe", "grösse", 2}, // runes, not bytes
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.b, c.a, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	kinds := []string{"directive", "tool", "foreach", "branch", "return", "sleep", "wait_message"}
	for _, c := range []struct{ s, want string }{
		{"directve", "directive"},
		{"forech", "foreach"},
		{"tol", "tool"},    // short: one edit
		{"tl", ""},         // two edits from tool: too far for a short word
		{"slepe", "sleep"}, // a transposition
		{"wait_mesage", "wait_message"},
		{"subgraph", ""},     // nothing near
		{"return", "return"}, // itself
	} {
		if got := Nearest(c.s, kinds); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.s, got, c.want)
		}
	}
	long := strings.Repeat("a", maxLen)
	if got := Nearest(long+"b", []string{long}); got != "" {
		t.Errorf("a word past %d bytes is never near: got %q", maxLen, got)
	}
	if got := Nearest(long[1:]+"b", []string{long + "b", long}); got != long {
		t.Errorf("a candidate past %d bytes is skipped: got %q", maxLen, got)
	}
	if got := Nearest("ab", []string{"ac", "ad"}); got != "ac" {
		t.Errorf("a tie goes to the earlier candidate: got %q", got)
	}
}
