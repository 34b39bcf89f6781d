package reply

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// redisError is an error reply as go-redis returns it (proto.RedisError).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func TestRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want *Refusal // nil: no refusal
	}{
		{"code and fields", redisError("CONFLICT 5"), &Refusal{Code: "CONFLICT", Fields: []string{"5"}}},
		{"one word, as Redis sends it", redisError("ERR NOTFOUND"), &Refusal{Code: "NOTFOUND"}},
		{"an empty field", redisError("NOENTRY "), &Refusal{Code: "NOENTRY"}},
		{"wrapped", fmt.Errorf("claim: %w", redisError("NOTCLAIMABLE waiting start")), &Refusal{Code: "NOTCLAIMABLE", Fields: []string{"waiting", "start"}}},
		{"underscore", redisError("A_B x"), nil},
		{"a Redis failure", redisError("ERR Error running script (call to f_1): @user_script:1: boom"), nil},
		{"not a reply", errors.New("CONFLICT 5"), nil},
		{"nil", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Refused(tc.err)
			if ok != (tc.want != nil) {
				t.Fatalf("Refused(%v) = %v, %v", tc.err, got, ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("refusal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRefusalFields(t *testing.T) {
	t.Parallel()
	r, ok := Refused(redisError("INSUFFICIENT 0 1000 400 600 a/b-1"))
	if !ok {
		t.Fatal("not a refusal")
	}
	if r.Int(0) != 0 || r.Int(1) != 1000 || r.Text(4) != "a/b-1" || r.Field(9) != "" || r.Int(4) != 0 {
		t.Fatalf("fields of %v", r)
	}
	l, _ := Refused(redisError("LINKED a already continues as b"))
	if l.Text(0) != "a already continues as b" || l.Text(7) != "" {
		t.Fatalf("text of %v: %q", l, l.Text(0))
	}
	if l.Error() != "LINKED a already continues as b" {
		t.Fatalf("Error() = %q", l.Error())
	}
}

func TestValues(t *testing.T) {
	t.Parallel()
	a := []any{int64(3), "12", nil, []any{"x", int64(4)}}
	if Int(At(a, 0)) != 3 || Int(At(a, 1)) != 12 || Int(At(a, 2)) != 0 || Int(At(a, 9)) != 0 {
		t.Fatal("Int")
	}
	if String(At(a, 0)) != "3" || String(At(a, 2)) != "" {
		t.Fatal("String")
	}
	if diff := cmp.Diff([]string{"x", "4"}, Strings(At(a, 3))); diff != "" {
		t.Fatalf("Strings (-want +got):\n%s", diff)
	}
	if Array("x") != nil {
		t.Fatal("Array of a string")
	}
}
