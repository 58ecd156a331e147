package filter

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshlimit/meshlimit/rules"
)

// The request and response views (hostrequest.go) on the fake host.

// countingHost counts the header reads of the fake host.
type countingHost struct {
	*fakeHost
	one, all int
}

func (c *countingHost) header(p part, name string, buf []byte) ([]byte, bool) {
	c.one++
	return c.fakeHost.header(p, name, buf)
}

func (c *countingHost) headers(p part) ([][2]string, error) {
	c.all++
	return c.fakeHost.headers(p)
}

func TestTheRequestViewReadsEachValueFromTheHostAtMostOnce(t *testing.T) {
	f := newFakeHost(t)
	f.cur = &fakeStream{req: fakeReq("/a/../b?x=1", [2]string{"x-tag", "one"}, [2]string{"x-tag", "two"})}
	f.props["xds\x00route_name"] = "r1"
	c := &countingHost{fakeHost: f}
	r := hostRequest{host: c}
	for range 2 {
		assert.Equal(t, "GET", r.Method())
		assert.Equal(t, "/a/../b?x=1", r.Path())
		assert.Equal(t, "a.example", r.Host())
	}
	assert.Equal(t, 3, c.one, "one read per pseudo-header, then kept")
	assert.Equal(t, "r1", r.RouteName())
	assert.Equal(t, "192.0.2.10:5555", r.SourceAddress())
	v, ok := r.HeaderValue("x-tag", 1)
	assert.True(t, ok)
	assert.Equal(t, "two", v, "a repeated header keeps every value")
	_, ok = r.HeaderValue("x-tag", 2)
	assert.False(t, ok)
	first, _ := r.Header("x-tag")
	assert.Equal(t, "one", first)
	assert.Equal(t, 1, c.all, "every header with one pairs call")
	assert.Equal(t, 3, c.one, "later lookups scan the pairs")
	pv, ok := r.Property([]string{"source", "address"})
	assert.True(t, ok)
	assert.Equal(t, "192.0.2.10:5555", pv)
	_, ok = r.Property(nil)
	assert.False(t, ok)
	_, ok = r.Property([]string{"no", "such"})
	assert.False(t, ok)

	r.reset()
	f.cur.req = fakeReq("/c")
	assert.Equal(t, "/c", r.Path(), "a new request reads again")
	assert.Equal(t, "/c", r.NormalizedPath())
}

func TestAHeaderReadAloneBeforeThePairsIsOneCall(t *testing.T) {
	f := newFakeHost(t)
	f.cur = &fakeStream{req: fakeReq("/", [2]string{"content-type", "application/grpc"})}
	c := &countingHost{fakeHost: f}
	r := hostRequest{host: c}
	v, ok := r.Header("content-type")
	assert.True(t, ok)
	assert.Equal(t, "application/grpc", v)
	_, ok = r.Header("x-missing")
	assert.False(t, ok)
	assert.Equal(t, 0, c.all)
}

func TestTheResponseViewGivesTheFirstValueOnly(t *testing.T) {
	f := newFakeHost(t)
	f.cur = &fakeStream{resp: [][2]string{{":status", "401"}, {"x-a", "1"}, {"x-a", "2"}}}
	r := hostResponse{host: f}
	v, ok := r.HeaderValue("x-a", 0)
	assert.True(t, ok)
	assert.Equal(t, "1", v)
	_, ok = r.HeaderValue("x-a", 1)
	assert.False(t, ok, "proxy_get_header_map_value has no second value")
	_, ok = r.header("x-b")
	assert.False(t, ok)
}

func TestTheSourceAddressIsParsedOncePerRequestForEveryPartThatKeysOnIt(t *testing.T) {
	f := newFakeHost(t)
	f.cur = &fakeStream{req: fakeReq("/")}
	r := hostRequest{host: f}
	a := r.SourceAddr()
	f.props[string(sourceAddressPath)] = "198.51.100.1:1"
	assert.Equal(t, a, r.SourceAddr(), "the request's parse is kept: no second read nor parse")
	want := rules.ParseClientAddr("192.0.2.10:5555")
	assert.Equal(t, want, a)

	r.reset()
	assert.Equal(t, rules.ParseClientAddr("198.51.100.1:1"), r.SourceAddr(), "a new request parses its own")
}

func TestASourceAddressIsParsedOnlyWhenItIsNotTheOneTheRequestBeforeParsed(t *testing.T) {
	f := newFakeHost(t)
	f.cur = &fakeStream{req: fakeReq("/")}
	r := hostRequest{host: f}
	for i, src := range []string{"192.0.2.10:5555", "192.0.2.10:5555", "192.0.2.1:5555", "192.0.2.10:5555", "[2001:db8::1]:443",
		"[2001:db8::1]:443", "not an address", "", "192.0.2.10:5555", "192.0.2.10", "192.0.2.10:5555"} {
		r.reset()
		f.props[string(sourceAddressPath)] = src
		assert.Equal(t, rules.ParseClientAddr(src), r.SourceAddr(), "request %d: %q", i, src)
	}

	marked := rules.ParseClientAddr("198.51.100.9")
	r.lastAddr = marked // what a repeat gets is the parse kept, not a new one
	r.reset()
	assert.Equal(t, marked, r.SourceAddr(), "the same source again")
	r.reset()
	f.props[string(sourceAddressPath)] = "192.0.2.10:5556"
	assert.Equal(t, rules.ParseClientAddr("192.0.2.10:5556"), r.SourceAddr(), "another source is parsed")
}

func TestSameBytesIsStringEquality(t *testing.T) {
	for _, a := range []string{"", "1", "192.0.2.10:5555", "192.0.2.10:5556", "[2001:db8::1]:443", "12345678", "12345679", "123456789abcdefg"} {
		for _, b := range []string{"", "1", "192.0.2.10:5555", "192.0.2.10:5556", "[2001:db8::1]:443", "12345678", "12345679", "123456789abcdefh"} {
			assert.Equal(t, a == b, sameBytes([]byte(a), b), "%q %q", a, b)
		}
	}
}
