package filter

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/wire"
)

// The /v1/check call: the request body the filter sends and the answer it reads, both in the
// one wire contract that the service decodes and encodes (package wire).

func cachedDenial(spec *rules.LimitSpec, wait int64) (d algorithms.Decision) {
	d.Limit = spec.Limit.Quota
	d.RetryAfter = time.Duration(wait)
	d.Reset = time.Duration(wait)
	return d
}

// readCheck reads the service's answer to a check in its callback. Anything but a 200 with a
// well-formed body of n decisions is a failure: a timeout (Envoy answers 504), no healthy upstream
// (503), an error of the service (503 when its store is down), a reset (no headers at all). The
// decisions are valid until the next answer read (a VM runs one callback at a time, and every
// caller consumes them before it returns).
func (g *globalClient) readCheck(numHeaders, bodySize, n int) ([]wire.Decision, error) {
	body, err := readCallBody(g.host, numHeaders, bodySize)
	if err != nil {
		return nil, err
	}
	_, g.answer, err = wire.DecodeAnswer(body, n, g.answer)
	if err != nil {
		return nil, fmt.Errorf("decoding the body: %w", err)
	}
	return g.answer, nil
}

// readPermitAnswer reads the answer to a renew or release call: a 200 with the counts.
func (g *globalClient) readPermitAnswer(numHeaders, bodySize int) (wire.Answer, error) {
	body, err := readCallBody(g.host, numHeaders, bodySize)
	if err != nil {
		return wire.Answer{}, err
	}
	return wire.DecodeFullAnswer(body, 0, g.answer)
}

// readCallBody reads the body of the service's answer in an http-call callback: a reset (no
// headers), a status other than 200 (a *statusError) or a body that is empty or over
// wire.MaxAnswerBytes is an error.
func readCallBody(h host, numHeaders, bodySize int) ([]byte, error) {
	if numHeaders == 0 {
		return nil, errors.New("the call failed (reset)")
	}
	headers, err := h.headers(answerPart)
	if err != nil {
		return nil, fmt.Errorf("reading the headers: %w", err)
	}
	status := answerStatus(headers)
	if status != "200" {
		return nil, newStatusError(h, status, bodySize)
	}
	if bodySize == 0 || bodySize > wire.MaxAnswerBytes {
		return nil, fmt.Errorf("body of %d bytes", bodySize)
	}
	body, err := h.body(answerPart, 0, bodySize)
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	return body, nil
}

// statusError is an answer other than 200. A 4xx is the service refusing the check (a request it
// cannot accept, e.g. beyond its bounds): not an outage, see rejected.
type statusError struct {
	status string
	body   string // the start of a 4xx answer's body, which names what the service refused
}

// answerStatus returns the :status of a call's answer (the last one, as the host lists them), or
// "" without one.
func answerStatus(headers [][2]string) string {
	status := ""
	for _, h := range headers {
		if h[0] == ":status" {
			status = h[1]
		}
	}
	return status
}

func newStatusError(h host, status string, bodySize int) *statusError {
	e := &statusError{status: status}
	if e.rejected() && bodySize > 0 {
		if b, err := h.body(answerPart, 0, min(bodySize, 256)); err == nil {
			e.body = string(b)
		}
	}
	return e
}

func (e *statusError) Error() string {
	if e.body != "" {
		return "status " + e.status + ": " + e.body
	}
	return "status " + e.status
}

// rejected reports whether the service refused the check (a 4xx answer).
func (e *statusError) rejected() bool { return len(e.status) == 3 && e.status[0] == '4' }

// descriptorCount counts the descriptors items send: one per limit.
func descriptorCount(items []globalItem) int {
	n := 0
	for i := range items {
		n += len(items[i].spec)
	}
	return n
}

// appendCheckBody appends the /v1/check request for items: one descriptor per limit, keyed by plugin,
// rule, limit fingerprint and key value (wire.Key), so that different plugins, rules and limit
// definitions never share a counter in the service; a concurrency limit acquires its item's permit.
func appendCheckBody(b []byte, plugin string, items []globalItem) []byte {
	b = wire.AppendRequestStart(b)
	n := 0
	for i := range items {
		it := &items[i]
		for k := range it.spec {
			spec := &it.spec[k]
			key := wire.Key{Plugin: plugin, Rule: it.rs.rule.Name, Fingerprint: spec.Fingerprint, Value: it.key}
			if spec.Concurrency > 0 {
				b = wire.AppendPermitDescriptor(b, n, key, spec.Concurrency, it.permit, globalPermitLease)
			} else {
				b = wire.AppendDescriptor(b, n, key, spec.Limit, it.cost)
			}
			n++
		}
	}
	return wire.AppendRequestEnd(b)
}
