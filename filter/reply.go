package filter

import (
	"math/rand/v2"
	"unsafe"

	"github.com/meshlimit/meshlimit/rules"
)

// replier answers for the plugin: the local reply of a denied request (rendered by rules, with the
// explanation of explain.go), the minimal one after a panic, and the quota fields of an admitted
// request's response. Its buffers are reused from request to request, so a warm request renders
// without allocating.
type replier struct {
	*env
	fields []rules.Field
	buf    []byte
	local  rules.LocalResponse
	pairs  [][2]string
	hash   []byte // the denier's key hash, rendered (explain.go)
}

// deny sends the configured local response for the current request: its outcomes and the rule that
// denied it are the decision's.
func (r *replier) deny(h *httpContext) {
	d := &r.d
	ct, _ := d.req.Header("content-type")
	r.buf = r.cfg.Response.Deny(&r.local, r.buf[:0], d.outcomes, rules.IsGRPC(ct), rand.Uint64())
	r.pairs = r.explain(h, fieldViews(r.pairs[:0], r.local.Headers))
	reply(r.host, r.local.Status, r.pairs, r.local.Body, r.local.GRPCStatus)
}

// fieldViews appends fields to dst as name-value pairs whose values view the fields' bytes: valid
// until the rendering buffer is reused, which is long enough for the host to copy them.
func fieldViews(dst [][2]string, fields []rules.Field) [][2]string {
	for _, f := range fields {
		dst = append(dst, [2]string{f.Name, unsafe.String(unsafe.SliceData(f.Value), len(f.Value))})
	}
	return dst
}

// denyMinimal sends the configured status with Retry-After: 1 and nothing else: after a panic the
// renderer itself may be what failed. A gRPC request gets RESOURCE_EXHAUSTED, as from Deny.
func (r *replier) denyMinimal() {
	status, grpc := uint32(429), rules.NoGRPCStatus
	if c := r.cfg; c != nil {
		status = c.Response.Status
	}
	if ct, ok := r.host.header(requestPart, "content-type", nil); ok && rules.IsGRPC(bytesString(ct)) {
		status, grpc = 200, rules.GRPCResourceExhausted
	}
	reply(r.host, status, [][2]string{{rules.HeaderRetryAfter, "1"}}, nil, grpc)
}

// addQuota adds an admitted request's quota fields to the upstream's response (none for a stream
// without outcomes: the check is inlined at the caller).
func (r *replier) addQuota(h *httpContext) {
	if h.quota.outcomes != nil {
		r.addFields(h.quota.outcomes)
	}
}

func (r *replier) addFields(outcomes []rules.Outcome) {
	random := uint64(0) // drawn only for a configured jitter
	if r.cfg.Response.AllowedUsesRandom() {
		random = rand.Uint64()
	}
	r.fields, r.buf = r.cfg.Response.AppendAllowed(r.fields[:0], r.buf[:0], outcomes, random)
	for i := range r.fields { // by index: no copy of each field
		r.raw.addHeader(responsePart, r.fields[i].Name, r.fields[i].Value) // the host copies the value
	}
}
