package service

import (
	"bytes"
	"io"

	"github.com/meshlimit/meshlimit/algorithms"
)

// The fast path of the check decoder. Proxies send check bodies of one plain shape: an object
// with "descriptors" (and maybe "now_us"), descriptors with the documented fields in lowercase,
// printable ASCII strings without escapes and plain integers. decodeCheckFast decodes exactly
// that shape without reflection and reports false on anything else (escapes, non-ASCII, null,
// a field name in another case, a duplicate field, a fraction, an exponent, a number of more
// than 18 digits, unknown fields, trailing data, a syntax error...); the caller then decodes
// the same bytes with the strict decoder (ParseCheckRequest), which decides and words every
// error. So where decodeCheckFast succeeds, it yields the same CheckRequest as encoding/json
// would (FuzzFastDecodeMatchesStrict checks this), and the validation that follows is shared.

// algorithmNames maps every algorithm name to itself, so that decoding a known name does not
// allocate.
var algorithmNames = func() map[string]string {
	m := make(map[string]string, len(algorithms.Kinds))
	for _, k := range algorithms.Kinds {
		m[k.String()] = k.String()
	}
	return m
}()

type fastDecoder struct {
	b []byte
	i int
}

// decodeCheckFast decodes b into req (whose Descriptors it reuses), or reports false.
func decodeCheckFast(b []byte, req *CheckRequest) bool {
	d := fastDecoder{b: b}
	req.Descriptors, req.NowUs = req.Descriptors[:0], nil
	if !d.byte('{') {
		return false
	}
	var seenDescriptors, seenNow bool
	for {
		name, ok := d.string()
		if !ok || !d.byte(':') {
			return false
		}
		switch string(name) {
		case "descriptors":
			if seenDescriptors || !d.descriptors(req) {
				return false
			}
			seenDescriptors = true
		case "now_us":
			n, ok := d.int()
			if seenNow || !ok {
				return false
			}
			seenNow = true
			req.NowUs = &n
		default:
			return false
		}
		if d.byte(',') {
			continue
		}
		if !d.byte('}') {
			return false
		}
		d.space()
		// Only the complete shape with descriptors; {} and the like go to the strict decoder.
		return d.i == len(d.b) && seenDescriptors
	}
}

func (d *fastDecoder) descriptors(req *CheckRequest) bool {
	if !d.byte('[') {
		return false
	}
	if d.byte(']') {
		if req.Descriptors == nil {
			req.Descriptors = []DescriptorRequest{}
		}
		return true
	}
	for {
		req.Descriptors = append(req.Descriptors, DescriptorRequest{})
		if !d.descriptor(&req.Descriptors[len(req.Descriptors)-1]) {
			return false
		}
		if d.byte(',') {
			continue
		}
		return d.byte(']')
	}
}

func (d *fastDecoder) descriptor(r *DescriptorRequest) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	var seen uint8
	for {
		name, ok := d.string()
		if !ok || !d.byte(':') {
			return false
		}
		var bit uint8
		switch string(name) {
		case "key":
			bit = 1
			v, ok := d.string()
			if !ok {
				return false
			}
			r.Key = string(v)
		case "algorithm":
			bit = 2
			v, ok := d.string()
			if !ok {
				return false
			}
			if r.Algorithm, ok = algorithmNames[string(v)]; !ok {
				r.Algorithm = string(v)
			}
		case "quota":
			bit = 4
			if r.Quota, ok = d.int(); !ok {
				return false
			}
		case "window_ms":
			bit = 8
			if r.WindowMs, ok = d.int(); !ok {
				return false
			}
		case "burst":
			bit = 16
			if r.Burst, ok = d.int(); !ok {
				return false
			}
		case "cost":
			bit = 32
			n, ok := d.int()
			if !ok {
				return false
			}
			r.Cost = &n
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if d.byte(',') {
			continue
		}
		return d.byte('}')
	}
}

// space skips JSON whitespace.
func (d *fastDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c after optional whitespace.
func (d *fastDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// string consumes a string of printable ASCII without escapes and returns its contents.
func (d *fastDecoder) string() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	for j := d.i; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[d.i:j]
			d.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// int consumes a JSON integer of at most 18 digits (no fraction, no exponent).
func (d *fastDecoder) int() (int64, bool) {
	d.space()
	j := d.i
	neg := j < len(d.b) && d.b[j] == '-'
	if neg {
		j++
	}
	start := j
	var n int64
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		n = n*10 + int64(d.b[j]-'0')
		j++
	}
	switch digits := j - start; {
	case digits == 0 || digits > 18 || (digits > 1 && d.b[start] == '0'):
		return 0, false
	case j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E'):
		return 0, false
	}
	d.i = j
	if neg {
		n = -n
	}
	return n, true
}

// checkScratch holds what one check reuses from the last: the body, the decoded request, the
// descriptors and the answer.
type checkScratch struct {
	body  []byte
	req   CheckRequest
	descs []Descriptor
	decs  []DescriptorDecision
	out   []byte
}

// maxKeptBody bounds the buffers a checkScratch keeps for the next check.
const maxKeptBody = 8 << 10

// readBody reads all of r into s.body. On a read error (such as *http.MaxBytesError) it
// returns the error with what was read before it.
func (s *checkScratch) readBody(r io.Reader, sizeHint int64) error {
	b := s.body[:0]
	if sizeHint > 0 && sizeHint <= maxKeptBody && int(sizeHint) >= cap(b) {
		b = make([]byte, 0, sizeHint+1) // +1: room to see EOF without growing
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			s.body = b
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// errReader returns err from every Read.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// parseCheck decodes and validates a check body already read into s.body, as
// ParseCheckRequest would: the fast path when the body has the plain shape, the strict
// decoder otherwise. opts must have its defaults applied.
func (s *checkScratch) parseCheck(opts ParseOptions) (Check, error) {
	if decodeCheckFast(s.body, &s.req) {
		c, err := s.req.check(opts, s.descs)
		if err == nil {
			s.descs = c.Descriptors
		}
		return c, err
	}
	return ParseCheckRequest(bytes.NewReader(s.body), opts)
}

// reset drops what the scratch should not keep: key strings (so that they can be collected)
// and buffers grown by an unusual check.
func (s *checkScratch) reset() {
	clear(s.req.Descriptors)
	clear(s.descs)
	if cap(s.body) > maxKeptBody {
		s.body = nil
	}
	if cap(s.out) > maxKeptBody {
		s.out = nil
	}
	if cap(s.req.Descriptors) > defaultMaxDescriptors {
		s.req.Descriptors = nil
	}
	if cap(s.descs) > defaultMaxDescriptors {
		s.descs = nil
	}
	if cap(s.decs) > defaultMaxDescriptors {
		s.decs = nil
	}
}
