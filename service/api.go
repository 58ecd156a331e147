package service

import (
	"io"
	"time"

	"github.com/meshlimit/meshlimit/wire"
)

// ParseOptions bounds what ParseCheckRequest accepts (wire.DecodeOptions): zero fields take
// the defaults, wire.MaxDescriptors and wire.MaxKeyBytes, which are also the upper bounds.
type ParseOptions = wire.DecodeOptions

// RequestError reports a check request that cannot be accepted. Field is the JSON path of the
// offending value ("descriptors[2].quota"), or "body" for the document as a whole.
type RequestError = wire.FieldError

// Check is a validated check request.
type Check struct {
	Descriptors []Descriptor
	Now         time.Time // zero: the store's clock
}

// ParseCheckRequest reads, decodes and validates a /v1/check body with wire.DecodeRequest:
// strictly, as API.md says. Every error it returns is a *RequestError, except errors from
// reading body (such as *http.MaxBytesError), which are returned unchanged.
func ParseCheckRequest(body io.Reader, opts ParseOptions) (Check, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return Check{}, err
	}
	var req wire.Request
	if err := wire.DecodeRequest(b, opts, &req); err != nil {
		return Check{}, err
	}
	return checkOf(&req), nil
}

// checkOf returns the Check of a decoded request (sharing its descriptors).
func checkOf(req *wire.Request) Check {
	c := Check{Descriptors: req.Descriptors}
	if req.HasNow {
		c.Now = time.UnixMicro(req.NowUs)
	}
	return c
}

// appendCheckResponse appends the JSON answer to a decided check (see API.md), with the
// permits renewed and released when the check had a renew or release list.
func appendCheckResponse(b []byte, o Outcome, lists bool, pc permitCounts) []byte {
	b = wire.AppendAnswerStart(b, o.Allowed)
	for i, d := range o.Decisions {
		b = wire.AppendDecision(b, i, wire.FromAlgorithms(d.Decision, d.Skipped))
	}
	if lists {
		return wire.AppendAnswerEndPermits(b, pc.renewed, pc.released, pc.lost)
	}
	return wire.AppendAnswerEnd(b)
}

// checkScratch holds what one check reuses from the last: the body, the decoded request, the
// decisions and the answer.
type checkScratch struct {
	body []byte
	req  wire.Request
	decs []DescriptorDecision
	out  []byte
}

// maxKeptBody bounds the buffers a checkScratch keeps for the next check.
const maxKeptBody = 8 << 10

// readBody reads all of r into s.body. On a read error (such as *http.MaxBytesError) it
// returns the error.
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

// reset drops what the scratch should not keep: key strings (so that they can be collected)
// and buffers grown by an unusual check.
func (s *checkScratch) reset() {
	clear(s.req.Descriptors)
	if cap(s.body) > maxKeptBody {
		s.body = nil
	}
	if cap(s.out) > maxKeptBody {
		s.out = nil
	}
	clear(s.req.Renew)
	clear(s.req.Release)
	clear(s.req.Settle)
	if cap(s.req.Settle) > wire.MaxDescriptors {
		s.req.Settle = nil
	}
	if cap(s.req.Descriptors) > wire.MaxDescriptors {
		s.req.Descriptors = nil
	}
	if cap(s.decs) > wire.MaxDescriptors {
		s.decs = nil
	}
}
