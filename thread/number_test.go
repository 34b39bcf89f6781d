package thread

import (
	"encoding/json"
	"math"
	"testing"
)

func TestNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want float64
		err  string // "": none
	}{
		{3, 3, ""},
		{int8(-4), -4, ""},
		{int32(7), 7, ""},
		{int64(1) << 53, 1 << 53, ""},
		{uint8(9), 9, ""},
		{uint64(12), 12, ""},
		{float32(0.5), 0.5, ""},
		{2.25, 2.25, ""},
		{math.Copysign(0, -1), 0, ""}, // negative zero
		{json.Number("1e3"), 1000, ""},
		{"0.25", 0.25, ""},
		{" 12 ", 12, ""},
		{"-3", -3, ""},
		{"1e3", 1000, ""},
		{"abc", 0, `"abc" is not a number`},
		{"", 0, `"" is not a number`},
		{"NaN", 0, `"NaN" is not a number`},
		{"+Inf", 0, `"+Inf" is not a number`},
		{math.NaN(), 0, "NaN is not a finite number"},
		{math.Inf(-1), 0, "-Inf is not a finite number"},
		{float32(math.Inf(1)), 0, "+Inf is not a finite number"},
		{json.Number("x"), 0, `"x" is not a number`},
		{nil, 0, "a missing value is not a number"},
		{true, 0, "true (bool) is not a number"},
		{[]any{1}, 0, "[1] ([]interface {}) is not a number"},
	} {
		got, err := Number(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("Number(%#v): %v", tc.in, err)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("Number(%#v) = %v, %v; want error %q", tc.in, got, err, tc.err)
		case tc.err == "" && got != tc.want:
			t.Errorf("Number(%#v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestBool(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     any
		want   bool
		wantOK bool
	}{
		{true, true, true},
		{false, false, true},
		{"true", true, true},
		{" FALSE ", false, true},
		{"True", true, true},
		{"yes", false, false},
		{"1", false, false},
		{1, false, false},
		{nil, false, false},
	} {
		got, ok := Bool(tc.in)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("Bool(%#v) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}
