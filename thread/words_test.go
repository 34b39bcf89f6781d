package thread

import "testing"

func TestCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0 steps", 1: "1 step", 2: "2 steps", 11: "11 steps"} {
		if got := Count(n, "step", "steps"); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Count(1, "child", "children"); got != "1 child" {
		t.Errorf("Count(1, child, children) = %q", got)
	}
}
