package service

import (
	"context"
	"errors"

	"github.com/meshlimit/meshlimit/algorithms"
)

// BatchDecider is a Store that also decides the descriptors of a check in one call: the Redis
// store sends them in one round trip (one script), whatever their number.
type BatchDecider interface {
	Store
	// DecideAll decides reqs in order as calls of Decide one after the other would, stopping
	// after the first denial, writes their decisions to out (as long as reqs) and returns how
	// many it decided: up to and including the first denial, or all. The requests after a
	// denial are not charged. An invalid request fails the whole batch before anything is
	// decided. On an error wrapping ErrStoreFull it returns how many were decided before the
	// request the store refused (their decisions in out, their charges kept); that request and
	// those after it are not charged, so that a caller may decide them elsewhere (FullFallback).
	// On any other error it returns 0, and each request is left as its Decide on an error
	// would leave it: unchanged or charged.
	DecideAll(ctx context.Context, reqs []Request, out []algorithms.Decision) (int, error)
}

// DecideAll decides reqs with s into out as BatchDecider.DecideAll does: in one call when s is
// a BatchDecider, else by calls of Decide one after the other.
func DecideAll(ctx context.Context, s Store, reqs []Request, out []algorithms.Decision) (int, error) {
	if len(out) != len(reqs) {
		return 0, errors.New("service: DecideAll: out and reqs differ in length")
	}
	if b, ok := s.(BatchDecider); ok {
		return b.DecideAll(ctx, reqs, out)
	}
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return 0, err
		}
	}
	return DecideEach(ctx, s, reqs, out)
}

// DecideEach decides valid reqs by calls of s.Decide one after the other, as DecideAll's
// contract says: for the stores whose batch falls back to single calls.
func DecideEach(ctx context.Context, s Store, reqs []Request, out []algorithms.Decision) (int, error) {
	for i, r := range reqs {
		d, err := s.Decide(ctx, r)
		if errors.Is(err, ErrStoreFull) {
			return i, err
		}
		if err != nil {
			return 0, err
		}
		out[i] = d
		if !d.Allowed {
			return i + 1, nil
		}
	}
	return len(reqs), nil
}
