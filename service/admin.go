package service

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/wire"
)

// The admin API (API.md, "Admin API"): an operator inspects the state of one key of a
// descriptor, or resets it (after a successful login, say), without charging it.
//
//	POST /v1/admin/inspect  {"descriptors": [...]}  what each descriptor's key has left
//	POST /v1/admin/reset    {"descriptors": [...]}  forget each descriptor's key: it starts fresh
//
// The body is a check request (descriptors as the filter sends them; cost is ignored). Every
// call needs "Authorization: Bearer <token>", compared in constant time; without a token the
// admin API answers 403 to everything, so it is never open by accident.
//
// A reset also appends every distinct key it was given to the store's reset log (resets.go)
// before it answers, whether or not the store held state for it (a local rule's state lives
// only in the proxies): the proxies poll the log and forget the same keys in their shared data.
// The answer's "seq" is the log position of the last entry. A reset whose keys cannot be
// logged is answered 503: the proxies would not hear of it, and retrying is harmless.

// AdminPrefix is the path prefix of the admin API.
const AdminPrefix = "/v1/admin/"

// adminTimeout bounds the store work of one admin call.
const adminTimeout = time.Second

// KeyStore is what a Store offers the admin API: a key's state, read or forgotten.
type KeyStore interface {
	// Inspect reports the state of req's key under req's limit at req.Now (zero: now), without
	// changing it. Cost is ignored.
	Inspect(ctx context.Context, req Request) (KeyState, error)
	// Reset deletes the state of req's key under req's limit and reports whether there was one.
	Reset(ctx context.Context, req Request) (bool, error)
}

// KeyState is what Inspect reports.
type KeyState struct {
	// Found reports that the store holds state for the key.
	Found bool
	// Remaining and Reset are what a request would find: the units available now, and the time
	// until the full capacity is back (algorithms.Limit.Peek). A fresh key has the capacity.
	Remaining int64
	Reset     time.Duration
}

// PeekState is what Inspect reports of state, the algorithms package's encoding of a key's
// state (nil: none), under limit at now: a state that cannot be read is reported as fresh, as
// the stores decide on it.
func PeekState(limit algorithms.Limit, state []byte, now time.Time) (KeyState, error) {
	d, err := limit.Peek(state, now.UnixNano())
	if errors.Is(err, algorithms.ErrMalformedState) {
		d, err = limit.Peek(nil, now.UnixNano())
	}
	if err != nil {
		return KeyState{}, err
	}
	return KeyState{Found: len(state) > 0, Remaining: d.Remaining, Reset: d.Reset}, nil
}

// admin serves the admin API.
type admin struct {
	store   Store
	metrics *Metrics
	token   []byte
}

// adminKey is one element of an admin answer.
type adminKey struct {
	Key       string `json:"key"`
	Algorithm string `json:"algorithm"`
	Found     *bool  `json:"found,omitempty"`
	Limit     int64  `json:"limit,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	ResetMs   *int64 `json:"reset_ms,omitempty"`
	Deleted   *bool  `json:"deleted,omitempty"`
}

// adminAnswer is the answer of the admin API: the keys, and for a reset the log position of
// its last entry.
type adminAnswer struct {
	Keys []adminKey `json:"keys"`
	Seq  *uint64    `json:"seq,omitempty"`
}

// ServeHTTP implements http.Handler.
func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.URL.Path, AdminPrefix)
	if op != "inspect" && op != "reset" {
		adminError(w, http.StatusNotFound, "no such path: the admin API serves "+AdminPrefix+"inspect and "+AdminPrefix+"reset")
		return
	}
	req, ok := a.request(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	out, err := a.run(ctx, op, req)
	if err != nil {
		adminError(w, http.StatusServiceUnavailable, "store: "+err.Error())
		return
	}
	answer := adminAnswer{Keys: out}
	if op == "reset" {
		seq, err := a.logResets(ctx, req.Descriptors)
		if err != nil {
			adminError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		answer.Seq = &seq
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// request returns the descriptors of an admin call: a POST with the bearer token and a check
// body without permits. Otherwise it answers the error and reports false.
func (a *admin) request(w http.ResponseWriter, r *http.Request) (*wire.Request, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		adminError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": method not allowed (want POST)")
		return nil, false
	}
	if len(a.token) == 0 {
		adminError(w, http.StatusForbidden, "the admin API is disabled: the service has no admin token")
		return nil, false
	}
	got := bearerToken(r.Header.Get("Authorization"))
	if subtle.ConstantTimeCompare([]byte(got), a.token) != 1 {
		adminError(w, http.StatusUnauthorized, "Authorization: missing or wrong bearer token")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, wire.MaxBodyBytes))
	if err != nil {
		adminError(w, http.StatusRequestEntityTooLarge, "body: "+err.Error())
		return nil, false
	}
	var req wire.Request
	if err := wire.DecodeRequest(body, wire.DecodeOptions{AllowClientTime: true}, &req); err != nil {
		adminError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	for _, d := range req.Descriptors {
		if d.Permit != "" {
			adminError(w, http.StatusBadRequest, "descriptors: concurrency permits are not inspected or reset by the admin API")
			return nil, false
		}
	}
	return &req, true
}

// logResets appends the distinct keys of descs to the reset log and returns the position of
// the last entry.
func (a *admin) logResets(ctx context.Context, descs []wire.Descriptor) (uint64, error) {
	keys := distinctKeys(descs)
	seq, err := a.store.AppendResets(ctx, keys)
	if err != nil {
		return 0, errors.New("reset log: " + err.Error() + ": the service forgot the keys, but the proxies will not hear of the reset (retry it)")
	}
	a.metrics.resetsLogged(len(keys))
	return seq, nil
}

// run applies op to every descriptor of req.
func (a *admin) run(ctx context.Context, op string, req *wire.Request) ([]adminKey, error) {
	now := requestTime(req)
	out := make([]adminKey, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		sr := Request{Key: d.Key, Limit: d.Limit, Cost: 1, Now: now}
		k := adminKey{Key: d.Key, Algorithm: d.Limit.Kind.String()}
		if op == "reset" {
			deleted, err := a.store.Reset(ctx, sr)
			if err != nil {
				return nil, err
			}
			k.Deleted = &deleted
		} else {
			st, err := a.store.Inspect(ctx, sr)
			if err != nil {
				return nil, err
			}
			ms := st.Reset.Milliseconds()
			k.Found, k.Limit, k.Remaining, k.ResetMs = &st.Found, d.Limit.Quota, &st.Remaining, &ms
		}
		out = append(out, k)
	}
	return out, nil
}

func adminError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
