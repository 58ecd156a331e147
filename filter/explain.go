package filter

import (
	"unsafe"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"

	"github.com/meshlimit/meshlimit/abi"
	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/rules"
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
	propRule    = abi.PropertyPath("meshlimit.rule")
	propLimit   = abi.PropertyPath("meshlimit.limit")
	propKeyHash = abi.PropertyPath("meshlimit.key_hash")
)

// explain records why the current request is denied and returns pairs with the explain header
// appended when one is configured.
func (h *httpContext) explain(pairs [][2]string) [][2]string {
	p := h.plugin
	s := &p.scratch
	rs := s.resp.denier
	if rs == nil {
		return pairs
	}
	limit := ""
	for i := range s.outcomes {
		if !s.outcomes[i].Decision.Allowed {
			limit = s.outcomes[i].Limit.Name
			break
		}
	}
	s.resp.hash = keyHash(s.resp.hash[:0], p.name, h.denierKey(rs))
	kh := s.resp.hash
	// The host copies the values during the calls: views of the strings are enough. An empty limit
	// is not written: the filter state stays unset, as it always has (the SDK refused empty values).
	_ = abi.SetProperty(propRule, bytesOf(rs.rule.Name))
	if limit != "" {
		_ = abi.SetProperty(propLimit, bytesOf(limit))
	}
	_ = abi.SetProperty(propKeyHash, kh)
	if p.cfg.LogLevel <= rules.LogDebug {
		proxywasm.LogDebugf("meshlimit: denied by rule %s, limit %s, key hash %s", rs.rule.Name, limit, kh)
	}
	if name := p.cfg.Response.ExplainHeader; name != "" {
		pairs = append(pairs, [2]string{name, rs.rule.Name})
	}
	return pairs
}

// denierKey returns the key value the denying rule decided: a global item's, or the last key the
// local path computed (the local path stops at the first denial).
func (h *httpContext) denierKey(rs *ruleState) string {
	for _, items := range [2][]globalItem{h.globals, h.plugin.scratch.globals} {
		for i := range items {
			if items[i].rs == rs {
				return items[i].key
			}
		}
	}
	k := h.plugin.scratch.key
	return unsafe.String(unsafe.SliceData(k), len(k))
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
