package wire

import (
	"strconv"
	"time"
)

// Concurrency permits: a descriptor with the algorithm "concurrency" acquires a permit (one
// in-flight request) of its key, of which at most quota are held at once; the request's
// "renew" list extends the lease of held permits and its "release" list gives permits back:
//
//	{"descriptors":[{"key":"<key>","algorithm":"concurrency","quota":20,"permit":"<id>","lease_ms":10000}]}
//	{"renew":[{"key":"<key>","permit":"<id>","lease_ms":10000}]}
//	{"release":[{"key":"<key>","permit":"<id>"}]}
//
// A permit that is neither renewed nor released expires at the end of its lease, so a proxy
// that dies or loses the end of a stream cannot hold it longer. The answer to a request with
// a renew or release list also carries "renewed" and "released": how many of its permits were
// still held and got their lease extended, and how many were held and are given back; and,
// when some renewals found their permit gone, "lost": their indexes in the renew list.

const (
	// Concurrency is the algorithm name of a permit descriptor.
	Concurrency = "concurrency"
	// MaxConcurrency is the largest quota of a permit descriptor: permits held at once.
	MaxConcurrency = 1_000_000
	// MaxPermitBytes is the longest permit id, in bytes of clean UTF-8 (as a key).
	MaxPermitBytes = 128
	// MinLeaseMs and MaxLeaseMs bound a permit's lease: long enough to outlive a few missed
	// renewals, short enough that a lost release is reclaimed.
	MinLeaseMs = 100
	MaxLeaseMs = 3_600_000
)

// PermitRef names a held permit in a renew or release list. Lease is the new lease of a
// renewal (zero in a release).
type PermitRef struct {
	Key    string
	Permit string
	Lease  time.Duration
}

// PermitList is one of the request's lists of held permits.
type PermitList uint8

// The permit lists.
const (
	Renew PermitList = iota
	Release
)

func (l PermitList) String() string {
	if l == Release {
		return "release"
	}
	return "renew"
}

// AppendPermitDescriptor appends descriptor i of a check request that acquires permit of key
// k, at most quota held at once, for lease (sent in whole milliseconds, rounded up). A permit
// id that the service would refuse is sent hashed, as a key part is (see Key); the same id is
// always sent the same way, so renew and release name what was acquired.
func AppendPermitDescriptor(b []byte, i int, k Key, quota int64, permit string, lease time.Duration) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"key":"`...)
	b = appendKey(b, k)
	b = append(b, `","algorithm":"concurrency","quota":`...)
	b = strconv.AppendInt(b, quota, 10)
	b = append(b, `,"permit":"`...)
	b = appendPart(b, permit, MaxPermitBytes)
	b = append(b, `","lease_ms":`...)
	b = strconv.AppendInt(b, ceilMs(lease), 10)
	return append(b, '}')
}

// AppendPermitListStart appends the start of list: as the request's first member when
// afterDescriptors is false (b is empty), else after its descriptors (closing their array).
// AppendPermitRef then appends each entry and AppendRequestEnd closes the request (a second
// list may be started first, with afterDescriptors true).
func AppendPermitListStart(b []byte, list PermitList, afterDescriptors bool) []byte {
	if afterDescriptors {
		b = append(b, `],"`...)
	} else {
		b = append(b, `{"`...)
	}
	b = append(b, list.String()...)
	return append(b, `":[`...)
}

// AppendPermitRef appends entry i of a renew or release list: permit of key k, with lease (in
// whole milliseconds, rounded up) when it is positive (a renewal; a release has none).
func AppendPermitRef(b []byte, i int, k Key, permit string, lease time.Duration) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"key":"`...)
	b = appendKey(b, k)
	b = append(b, `","permit":"`...)
	b = appendPart(b, permit, MaxPermitBytes)
	b = append(b, '"')
	if lease > 0 {
		b = append(b, `,"lease_ms":`...)
		b = strconv.AppendInt(b, ceilMs(lease), 10)
	}
	return append(b, '}')
}

// permitID reads a permit id.
func (d *requestDecoder) permitID(at loc) (string, *FieldError) {
	if d.peek() != '"' {
		return "", d.wrongType(at, "a string")
	}
	v, err := d.str(at, false)
	if err != nil {
		return "", err
	}
	if err := CheckKey(string(v), MaxPermitBytes); err != nil {
		return "", at.err(false, err.Error())
	}
	return string(v), nil
}

// validatePermit checks permit descriptor i and sets its Lease.
func validatePermit(i, seen int, out *Descriptor, leaseMs int64, maxKeyBytes int) *FieldError {
	at := func(field string) loc { return loc{desc: i, field: field} }
	switch {
	case seen&fKey == 0:
		return at("key").err(false, "required")
	case seen&fPermit == 0:
		return at("permit").err(false, "required for algorithm concurrency")
	case seen&fWindow != 0:
		return at("window_ms").err(false, "not allowed for algorithm concurrency (a permit is held until released or its lease ends)")
	case seen&fBurst != 0:
		return at("burst").err(false, "not allowed for algorithm concurrency")
	case out.Cost != 1:
		return at("cost").err(false, "must be 1 or absent for algorithm concurrency (a permit is one request), got "+strconv.FormatInt(out.Cost, 10))
	case out.Limit.Quota < 1 || out.Limit.Quota > MaxConcurrency:
		return at("quota").err(false, between(1, MaxConcurrency, out.Limit.Quota)+" for concurrency")
	}
	if err := CheckKey(out.Key, maxKeyBytes); err != nil {
		return at("key").err(false, err.Error())
	}
	if seen&fLease == 0 {
		return at("lease_ms").err(false, "required for algorithm concurrency")
	}
	if leaseMs < MinLeaseMs || leaseMs > MaxLeaseMs {
		return at("lease_ms").err(false, between(MinLeaseMs, MaxLeaseMs, leaseMs))
	}
	out.Lease = time.Duration(leaseMs) * time.Millisecond
	return nil
}

// permitList decodes a renew or release list into list.
func (d *requestDecoder) permitList(name string, list *[]PermitRef) *FieldError {
	return d.array(loc{desc: -1, field: name}, d.opts.MaxDescriptors, "entries", func(i int) *FieldError {
		*list = append(*list, PermitRef{})
		return d.permitRef(name, i, &(*list)[i])
	})
}

// permitRef decodes entry i of list name into out: a renewal needs lease_ms, a release has none.
func (d *requestDecoder) permitRef(name string, i int, out *PermitRef) *FieldError {
	here := loc{desc: i, arr: name}
	var seen int
	var leaseMs int64
	err := d.object(here, "an object", func(m []byte) *FieldError {
		bit, field := descriptorField(m)
		at := loc{desc: i, arr: name, field: field}
		switch {
		case bit != fKey && bit != fPermit && (bit != fLease || name == "release"):
			return loc{desc: i, arr: name, field: fieldName(m)}.err(false, "unknown field")
		case seen&bit != 0:
			return at.err(false, "given twice")
		}
		seen |= bit
		var err *FieldError
		switch bit {
		case fKey:
			out.Key, err = d.stringValue(at)
		case fPermit:
			out.Permit, err = d.permitID(at)
		case fLease:
			leaseMs, err = d.integer(at)
		}
		return err
	})
	if err != nil {
		return err
	}
	return validateRef(here, seen, out, leaseMs, d.opts.MaxKeyBytes)
}

func validateRef(here loc, seen int, out *PermitRef, leaseMs int64, maxKeyBytes int) *FieldError {
	at := func(field string) loc { here.field = field; return here }
	if seen&fKey == 0 {
		return at("key").err(false, "required")
	}
	if err := CheckKey(out.Key, maxKeyBytes); err != nil {
		return at("key").err(false, err.Error())
	}
	if seen&fPermit == 0 {
		return at("permit").err(false, "required")
	}
	if here.arr == "release" {
		return nil
	}
	if seen&fLease == 0 {
		return at("lease_ms").err(false, "required")
	}
	if leaseMs < MinLeaseMs || leaseMs > MaxLeaseMs {
		return at("lease_ms").err(false, between(MinLeaseMs, MaxLeaseMs, leaseMs))
	}
	out.Lease = time.Duration(leaseMs) * time.Millisecond
	return nil
}

// AppendAnswerEndPermits appends the end of the answer to a request with a renew or release
// list: the permits renewed and released, the indexes of the renew entries not renewed (bit
// i of lost: entry i; written only when there are some), then the end, with a newline.
func AppendAnswerEndPermits(b []byte, renewed, released int, lost uint64) []byte {
	b = append(b, `],"renewed":`...)
	b = strconv.AppendInt(b, int64(renewed), 10)
	b = append(b, `,"released":`...)
	b = strconv.AppendInt(b, int64(released), 10)
	if lost != 0 {
		b = append(b, `,"lost":[`...)
		for i, first := 0, true; i < MaxDescriptors; i++ {
			if lost&(1<<i) != 0 {
				if !first {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, int64(i), 10)
				first = false
			}
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}
