package main

import (
	"net"
	"strings"
	"testing"
)

// FuzzCheckAddrs: a -redis list checkAddrs accepts is host:port entries, none empty, none
// twice, none a URL; and it never panics. Bounded: inputs over 1 KiB are skipped.
func FuzzCheckAddrs(f *testing.F) {
	for _, s := range []string{"127.0.0.1:6379", "a:1,b:2", "a:1,", ",a:1", "a:1,a:1", "redis://a:1", "rediss://u:p@a:1", "[::1]:6379", "a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1024 {
			t.Skip()
		}
		if checkAddrs(s) != nil || s == "" {
			return
		}
		seen := map[string]bool{}
		for _, a := range strings.Split(s, ",") {
			if _, _, err := net.SplitHostPort(a); err != nil || a == "" || seen[a] || strings.Contains(a, "://") {
				t.Fatalf("accepted %q: entry %q", s, a)
			}
			seen[a] = true
		}
	})
}
