package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/meshlimit/meshlimit/service/tracing"
	"github.com/meshlimit/meshlimit/wire"
)

// check serves POST /v1/check (API.md) and returns the status it answered: the body is read
// and decoded strictly (wire.DecodeRequest) into the scratch of an earlier check, then the
// permits are released and renewed, the settles applied and the descriptors decided, in that
// order, within the handler's deadline. It fills td with what the decision span records, the
// store's time only when traced.
func (h *Handler) check(w http.ResponseWriter, r *http.Request, traced bool, td *tracing.Decision) int {
	if !h.allowed(w, r, http.MethodPost) {
		return http.StatusMethodNotAllowed
	}
	if !h.authorized(w, r) {
		return http.StatusUnauthorized
	}
	s := h.scratch.Get().(*checkScratch)
	defer func() {
		s.reset()
		h.scratch.Put(s)
	}()
	if err := s.readBody(http.MaxBytesReader(w, r.Body, h.maxBody), r.ContentLength); err != nil {
		return h.bodyFailed(w, err, h.maxBody)
	}
	if err := wire.DecodeRequest(s.body, h.parse, &s.req); err != nil {
		h.metrics.error(errBadRequest)
		return h.writeError(w, http.StatusBadRequest, err.Error())
	}
	now := requestTime(&s.req)
	td.Descriptors = len(s.req.Descriptors)
	var storeStart time.Time
	if traced {
		storeStart = time.Now()
	}

	// The client connection is the flow a Gate shares the store fairly between.
	ctx, cancel := context.WithTimeout(WithFlow(r.Context(), r.RemoteAddr), h.timeout)
	defer cancel()
	// The whole check is admitted to the store, or refused, before its first store call: a
	// Gate never refuses its renewals after its releases went through.
	ctx, release, err := Admit(ctx, h.store, checkWork(&s.req))
	defer release() // (a panic's); done below as soon as the store work is
	var pc permitCounts
	lists := len(s.req.Renew)+len(s.req.Release) > 0
	if err == nil && lists { // releases first: they free what the descriptors may acquire
		pc, err = h.limiter.permits(ctx, s.req.Renew, s.req.Release, now)
	}
	// Settles before decisions: a refund frees what the descriptors may take.
	settled := -1 // no settle list
	if err == nil && len(s.req.Settle) > 0 {
		settled, err = h.limiter.settle(ctx, s.req.Settle, now)
	}
	o := outcome{allowed: true}
	if err == nil && len(s.req.Descriptors) > 0 {
		o, err = h.limiter.check(ctx, s.req.Descriptors, now, s.decs, &s.batch)
	}
	release() // the store's time the gate measures ends here, not after the answer is written
	if traced {
		td.Store = time.Since(storeStart)
	}
	if err != nil {
		kind := h.storeFailed(ctx, err)
		td.Outcome, td.ErrorType, td.Err = tracing.OutcomeError, errKindNames[kind], err
		if kind == errStoreFull {
			return h.writeError(w, http.StatusServiceUnavailable, "store full: Redis refuses writes for lack of memory")
		}
		return h.writeError(w, http.StatusServiceUnavailable, "store unavailable")
	}
	s.decs = o.decisions
	td.Outcome = tracing.OutcomeAllowed
	if !o.allowed {
		td.Outcome = tracing.OutcomeDenied
	}
	if traced {
		td.Rule = tracing.KeyRule(decidingKey(s.req.Descriptors, o))
	}
	s.out = appendCheckResponse(s.out[:0], o, lists, pc)
	if settled >= 0 {
		s.out = wire.AppendSettled(s.out, settled)
	}
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(s.out)
	return http.StatusOK
}

// checkWork is the store work of a check, counted as a Gate counts it: one unit per release,
// renewal, settle and descriptor.
func checkWork(req *wire.Request) int {
	return len(req.Release) + len(req.Renew) + len(req.Settle) + len(req.Descriptors)
}

// decidingKey is the key of the descriptor that decided o: the one that denied it, or the first.
func decidingKey(descs []wire.Descriptor, o outcome) string {
	if len(descs) == 0 {
		return ""
	}
	for i, d := range o.decisions {
		if !d.skipped && !d.Allowed {
			return descs[i].Key
		}
	}
	return descs[0].Key
}

// storeFailed counts and logs a store failure of a request whose store work ran under ctx, and
// returns its kind: the deadline, a full store, or any other failure.
func (h *Handler) storeFailed(ctx context.Context, err error) int {
	kind := errStore
	switch {
	case errors.Is(err, ErrStoreFull):
		kind = errStoreFull
	case errors.Is(err, ErrOverloaded) || timedOut(ctx, err):
		kind = errTimeout // a refusal by the Gate: the store could not answer in time
	}
	h.metrics.error(kind)
	h.logStoreError(err, kind)
	return kind
}

// timedOut reports whether a store error is the request's deadline: the context says so, the error
// wraps its DeadlineExceeded, or the deadline has passed (a client may give up a hair before the
// context's timer fires).
func timedOut(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// requestTime is the decision time of a decoded request: its now_us, or the zero Time (the
// store's clock).
func requestTime(req *wire.Request) time.Time {
	if req.HasNow {
		return time.UnixMicro(req.NowUs)
	}
	return time.Time{}
}

// appendCheckResponse appends the JSON answer to a decided check (see API.md), with the
// permits renewed and released when the check had a renew or release list.
func appendCheckResponse(b []byte, o outcome, lists bool, pc permitCounts) []byte {
	b = wire.AppendAnswerStart(b, o.allowed)
	for i, d := range o.decisions {
		b = wire.AppendDecision(b, i, wire.FromAlgorithms(d.Decision, d.skipped))
	}
	if lists {
		return wire.AppendAnswerEndPermits(b, pc.renewed, pc.released, pc.lost)
	}
	return wire.AppendAnswerEnd(b)
}

// checkScratch holds what one check reuses from the last: the body, the decoded request, the
// decisions and the answer.
type checkScratch struct {
	body  []byte
	req   wire.Request
	decs  []descriptorDecision
	batch batchScratch
	out   []byte
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
	if cap(s.batch.reqs) > wire.MaxDescriptors {
		s.batch = batchScratch{}
	}
}
