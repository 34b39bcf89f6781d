package httpauth

import (
	"net"
	"net/http"
	"strings"
)

// loopbackNames are the host names of a server bound to a loopback address.
var loopbackNames = []string{"localhost", "127.0.0.1", "::1"}

// IsLoopback reports whether a listen address only accepts local
// connections: a loopback IP or "localhost". An empty host (all
// interfaces) is not.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// LoopbackHosts are the Host names a server on a loopback addr answers
// (against DNS rebinding); nil, any, for another addr.
func LoopbackHosts(addr string) []string {
	if loop, err := IsLoopback(addr); err != nil || !loop {
		return nil
	}
	host, _, _ := net.SplitHostPort(addr)
	return append(append([]string{}, loopbackNames...), host)
}

// HostGuard refuses requests whose Host is not one of hosts (when any are
// given) with deny, which writes the response (421 Misdirected Request is
// the status to use); nil deny writes msg as plain text.
func HostGuard(hosts []string, deny func(w http.ResponseWriter, r *http.Request, msg string), next http.Handler) http.Handler {
	if len(hosts) == 0 {
		return next
	}
	if deny == nil {
		deny = func(w http.ResponseWriter, _ *http.Request, msg string) {
			http.Error(w, msg, http.StatusMisdirectedRequest)
		}
	}
	allowed := map[string]bool{}
	for _, h := range hosts {
		allowed[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !allowed[strings.ToLower(strings.Trim(host, "[]"))] {
			deny(w, r, "host not allowed")
			return
		}
		next.ServeHTTP(w, r)
	})
}
