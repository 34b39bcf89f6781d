package stack

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestOpenRedisErrorsHidePassword: no malformed URL form, of any scheme,
// puts its password (as written, decoded or quoted) in OpenRedis's error,
// in RedactURL's result or in MaskURLError's.
func TestOpenRedisErrorsHidePassword(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3tPW"
	urls := []string{
		"redis://user:" + pw + "@host:notaport",
		"redis://:" + pw + "@host/notadb",
		"redis://user:" + pw + " x@host",
		"redis://user:" + pw + "@[::1",
		"redis://user:" + pw + "%zz@host",
		"redis://user:" + pw + "@host?dial_timeout=abc",
		"redis://user:" + pw + "@host?bogus=1",
		"redis://user:" + pw + "@host\n",
		"redis://user:" + pw + "@host:1/0?protocol=x",
		"redis://" + pw + "@host:x",
		"redis://user:" + strings.Replace(pw, "3", "%33", 1) + "@host:x",
		"redis://user:" + pw + "\"q@host:x",
		"redis://user:" + pw + "/x@host:1",
		"rediss://user:" + pw + "@host:notaport",
		"rediss://:" + pw + "@host/1/2",
		"rediss://user:" + pw + "%@host",
		"redis-sentinel://:" + pw + "@h1,h2/x?master=m",
		"redis-sentinel://:" + pw + "@h1",
		"redis-sentinel://:" + pw + "%zz@h1?master=m",
		"redis-sentinel://:" + pw + "@h1:1,h2?master=m",
		"redis-sentinel://h1/x?master=m&sentinel_password=" + pw,
		"redis-sentinel://:" + pw + "@h1:x?master=m",
		"redis-cluster://:" + pw + "@/",
		"redis-cluster://:" + pw + "@h1:1,h2/abc",
		"redis-cluster://u:" + pw + "@h1:x",
		"redis-cluster://u:" + pw + "@h1 h2",
		"redis-cluster://u:" + pw + "%g@h1",
		"redis+x://user:" + pw + "@host",
		" redis://user:" + pw + "@host",
		"http://user:" + pw + "@host",
		"user:" + pw + "@host",
	}
	for _, raw := range urls {
		rdb, err := OpenRedis(raw)
		if rdb != nil {
			_ = rdb.Close()
		}
		if err == nil {
			t.Errorf("OpenRedis(%q): no error", raw)
			continue
		}
		for name, got := range map[string]string{
			"OpenRedis":    err.Error(),
			"RedactURL":    RedactURL(raw),
			"MaskURLError": MaskURLError(raw, errors.New("dial "+raw+": refused")).Error(),
		} {
			if leaks(got, pw) {
				t.Errorf("%s(%q) shows the password: %s", name, raw, got)
			}
		}
	}
}

// leaks reports whether s holds pw, plainly or percent-encoded.
func leaks(s, pw string) bool {
	dec, _ := url.PathUnescape(s)
	return strings.Contains(s, pw) || strings.Contains(dec, pw) || strings.Contains(s, strings.Replace(pw, "3", "%33", 1))
}

func TestRedactURLKeepsTheRest(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                           "redis://127.0.0.1:6379/0",
		"redis://user:pw@host:6379/2":                        "redis://user:xxxxx@host:6379/2",
		"redis://:pw@host":                                   "redis://:xxxxx@host",
		"redis-cluster://:p@w@h1:1,h2:2":                     "redis-cluster://:xxxxx@h1:1,h2:2",
		"redis-sentinel://h1/0?master=m&sentinel_password=s": "redis-sentinel://h1/0?master=m&sentinel_password=xxxxx",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}
