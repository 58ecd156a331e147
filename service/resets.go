package service

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/meshlimit/meshlimit/wire"
)

// The reset log (API.md, "Reset log"): an admin reset forgets a key in the store, but the
// proxies keep state of their own in Envoy's shared data (the over-limit cache and penalty box
// of global rules, and every local rule). So every admin reset is also appended to a bounded log
// in the store, which each proxy polls (POST /v1/resets) to forget the same keys.

// ResetLogSize is how many entries the reset log keeps: the last 1024 resets. A proxy that
// falls further behind is told its answer is truncated (it missed some resets).
const ResetLogSize = 1024

// resetsBodyBytes bounds a /v1/resets body: a plugin part of at most wire.MaxPluginBytes,
// each byte escaped at most 6-fold, and the rest of the object.
const resetsBodyBytes = 6*wire.MaxPluginBytes + 64

// minResetsTimeout is the least store deadline of a /v1/resets call (a read of up to
// ResetLogSize entries, off the request path of the proxies).
const minResetsTimeout = 100 * time.Millisecond

// ResetLog is the store's reset log: a bounded log of the keys admin resets forgot, in order.
type ResetLog interface {
	// AppendResets appends one entry per key, in order, and returns the position of the last.
	AppendResets(ctx context.Context, keys []string) (uint64, error)
	// ReadResets returns the entries after position since whose key starts with prefix, in
	// ascending order, at most max of them (none when max is 0), and the log's bounds.
	ReadResets(ctx context.Context, since uint64, prefix string, max int) (ResetPage, error)
}

// ResetPage is what ReadResets returns.
type ResetPage struct {
	// Latest is the log's last position; Oldest the position of its oldest retained entry
	// (Latest+1 when it retains none). Positions start at 1: a log that was never written to
	// has Latest 1 and no entry, so that a proxy that learned a position never mistakes an
	// entry for being before it.
	Latest, Oldest uint64
	// Entries are the matching entries, ascending.
	Entries []wire.Reset
	// More reports that more matching entries follow the last of Entries.
	More bool
}

// resetsAnswer is the answer to a proxy at position since, from the page read after since.
func resetsAnswer(since uint64, p ResetPage) wire.ResetsAnswer {
	switch {
	case since == 0: // no position: its state is fresh, it needs only the latest position
		return wire.ResetsAnswer{Seq: p.Latest}
	case since > p.Latest: // the store lost its log
		return wire.ResetsAnswer{Seq: p.Latest, Truncated: true}
	}
	a := wire.ResetsAnswer{Seq: p.Latest, Resets: p.Entries, More: p.More, Truncated: since+1 < p.Oldest}
	if p.More {
		a.Seq = p.Entries[len(p.Entries)-1].Seq
	}
	return a
}

// distinctKeys returns the keys of descs without repeats, in their first order.
func distinctKeys(descs []wire.Descriptor) []string {
	keys := make([]string, 0, len(descs))
	seen := make(map[string]bool, len(descs))
	for _, d := range descs {
		if !seen[d.Key] {
			seen[d.Key] = true
			keys = append(keys, d.Key)
		}
	}
	return keys
}

// resets serves POST /v1/resets: the entries of the reset log for one plugin's proxies. It
// returns the status it answered.
func (h *Handler) resets(w http.ResponseWriter, r *http.Request) int {
	if !h.allowed(w, r, http.MethodPost) {
		return http.StatusMethodNotAllowed
	}
	if !h.authorized(w, r) {
		return http.StatusUnauthorized
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, resetsBodyBytes))
	if err != nil {
		return h.bodyFailed(w, err, resetsBodyBytes)
	}
	var req wire.ResetsRequest
	if err := wire.DecodeResetsRequest(body, &req); err != nil {
		h.metrics.error(errBadRequest)
		return h.writeError(w, http.StatusBadRequest, err.Error())
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(h.timeout, minResetsTimeout))
	defer cancel()
	n := wire.MaxResetsPerAnswer
	if req.Since == 0 {
		n = 0 // a proxy without a position gets no entries
	}
	page, err := h.store.ReadResets(ctx, req.Since, req.Plugin+"/", n)
	if err != nil {
		h.storeFailed(ctx, err)
		return h.writeError(w, http.StatusServiceUnavailable, "store unavailable: the reset log cannot be read")
	}
	a := resetsAnswer(req.Since, page)
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(wire.AppendResetsAnswer(nil, &a))
	return http.StatusOK
}
