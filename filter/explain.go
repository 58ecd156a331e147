package filter

import (
	"unsafe"

	"github.com/meshlimit/meshlimit/internal/fnv"
)

// Explainability: a denied request says which rule, limit and key denied it.
//   - Filter state, through proxy_set_property, which Envoy stores as filter state "wasm.<name>"
//     for the rest of the stream: meshlimit.rule (the rule's name), meshlimit.limit (the policy
//     name of the limit that denied, "" when the rule's failure_mode did) and meshlimit.key_hash
//     (16 hex digits: FNV-1a of the plugin name and the key value, so that a log line can be
//     matched to a key without holding the key). Access logs read them as
//     %FILTER_STATE(wasm.meshlimit.rule:PLAIN)%. Proxy-wasm has no call that writes dynamic
//     metadata, so %DYNAMIC_METADATA(meshlimit:...)% stays empty (see docs/configuration.md).
//   - response.explain_header, when set: a header with the rule's name on the local reply.
//   - at log_level debug, one line with the same three values.
var (
	propRule    = propertyPath("meshlimit.rule")
	propLimit   = propertyPath("meshlimit.limit")
	propKeyHash = propertyPath("meshlimit.key_hash")
)

// explain records why the current request is denied and returns pairs with the explain header
// appended when one is configured.
func (r *replier) explain(h *httpContext, pairs [][2]string) [][2]string {
	d := &r.d
	rs := d.denier
	if rs == nil {
		return pairs
	}
	limit := ""
	for i := range d.outcomes {
		if !d.outcomes[i].Decision.Allowed {
			limit = d.outcomes[i].Limit.Name
			break
		}
	}
	r.hash = keyHash(r.hash[:0], r.name, denierKey(h, d, rs))
	kh := r.hash
	// The host copies the values during the calls: views of the strings are enough. An empty limit
	// is not written: the filter state stays unset, as it always has (the SDK refused empty values).
	r.host.setProperty(propRule, bytesOf(rs.rule.Name))
	if limit != "" {
		r.host.setProperty(propLimit, bytesOf(limit))
	}
	r.host.setProperty(propKeyHash, kh)
	if r.debugging() {
		logf(r.host, logDebug, "meshlimit: denied by rule %s, limit %s, key hash %s", rs.rule.Name, limit, kh)
	}
	if name := r.cfg.Response.ExplainHeader; name != "" {
		pairs = append(pairs, [2]string{name, rs.rule.Name})
	}
	return pairs
}

// denierKey returns the key value the denying rule decided: a global item's (of the stream's call,
// or of the request), or the last key the local path computed (the local path stops at the first
// denial).
func denierKey(h *httpContext, d *decision, rs *ruleState) string {
	for _, items := range [2][]globalItem{h.call.items, d.globals} {
		for i := range items {
			if items[i].rs == rs {
				return items[i].key
			}
		}
	}
	return bytesString(d.key)
}

// bytesOf views s as bytes, for a host call that copies them and never writes.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// keyHash appends the 16 hex digits of the FNV-1a hash of the plugin name and key to dst.
func keyHash(dst []byte, plugin, key string) []byte {
	const digits = "0123456789abcdef"
	v := fnv.AddString(fnv.AddString(fnv.Offset64, plugin), key)
	var b [16]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return append(dst, b[:]...)
}
