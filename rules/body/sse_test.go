package body

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSSEPassesEachEventsDataAndDropsEventsOverTheBound(t *testing.T) {
	var got []string
	s := SSE{Max: 64}
	collect := func(d []byte) { got = append(got, string(d)) }
	body := "event: x\ndata: {\"a\": 1}\n\n: comment\r\ndata: line1\r\ndata: line2\r\n\r\ndata: " + strings.Repeat("z", 100) + "\n\ndata: [DONE]\n\ndata: tail"
	for i := 0; i < len(body); i += 7 { // split mid-line, mid-CRLF
		s.Write([]byte(body[i:min(i+7, len(body))]), collect)
	}
	s.Close(collect)
	assert.Equal(t, []string{`{"a": 1}`, "line1\nline2", "[DONE]", "tail"}, got)
	assert.Equal(t, 1, s.Dropped)
}

// An event over the bound is dropped whole: neither a line dropped for its length nor the lines
// after it end the event, so no part of it is taken for an event of its own (an upstream whose one
// event holds a long text, then its usage, is not settled from the usage alone).
func TestSSEDropsAnEventOverTheBoundToItsEnd(t *testing.T) {
	var got []string
	collect := func(d []byte) { got = append(got, string(d)) }
	s := SSE{Max: 32}
	long := strings.Repeat("z", 100)
	body := "data: " + long + "\ndata: {\"usage\": 1}\n\ndata: {\"usage\": 2}\r\n" + long + "\r\ndata: {\"usage\": 3}\r\n\r\ndata: ok\n\n"
	for i := 0; i < len(body); i += 5 {
		s.Write([]byte(body[i:min(i+5, len(body))]), collect)
	}
	s.Close(collect)
	assert.Equal(t, []string{"ok"}, got)
	assert.Equal(t, 2, s.Dropped)
}

func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"usage\": 1}\n\n"), uint8(3))
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		s := SSE{Max: 32}
		n := int(step%16) + 1
		for i := 0; i < len(body); i += n {
			s.Write(body[i:min(i+n, len(body))], func(d []byte) { assert.LessOrEqual(t, len(d), 32) })
		}
		s.Close(func(d []byte) { assert.LessOrEqual(t, len(d), 32) })
		assert.LessOrEqual(t, cap(s.buf), 64, "what an SSE holds stays bounded")
	})
}
