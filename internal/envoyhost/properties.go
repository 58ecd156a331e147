package envoyhost

import (
	"encoding/binary"
	"net"
	"sort"
	"strconv"
	"strings"
)

const (
	defaultSourceAddress      = "127.0.0.1:40000"
	defaultDestinationAddress = "127.0.0.1:10000"
	defaultProtocol           = "HTTP/1.1"
)

// property resolves a NUL-joined property path the way Envoy's Context::getProperty
// does (§6). Injected values (StreamInfo.Properties, then Config.Properties) win over
// the built-in attributes; values set with proxy_set_property come last, like Envoy's
// filter state. request.*, response.*, source.*, destination.* and the stream's xds
// route and cluster names are NotFound outside a stream. The returned slice may alias
// a scratch buffer valid until the next property lookup.
func (v *VM) property(path string) ([]byte, Status) {
	st := v.stream()
	if st != nil {
		if val, ok := st.info.Properties[path]; ok {
			return val, StatusOK
		}
	}
	if val, ok := v.p.cfg.Properties[path]; ok {
		return val, StatusOK
	}
	top, rest, _ := strings.Cut(path, "\x00")
	if val, st := v.builtinProperty(st, top, rest); st != StatusNotFound {
		return val, st
	}
	fs := v.filterState
	if st != nil {
		fs = st.filterState
	}
	if val, ok := fs[path]; ok {
		return val, StatusOK
	}
	return nil, StatusNotFound
}

func (v *VM) builtinProperty(st *Stream, top, rest string) ([]byte, Status) {
	cfg := &v.p.cfg
	switch top {
	case "plugin_name":
		return v.text(cfg.PluginName, rest)
	case "plugin_root_id":
		return v.text(cfg.RootID, rest)
	case "plugin_vm_id":
		return v.text(cfg.VMID, rest)
	case "xds":
		return v.xdsProperty(st, rest)
	}
	if st == nil {
		return nil, StatusNotFound
	}
	switch top {
	case "request":
		return v.requestProperty(st, rest)
	case "response":
		return v.responseProperty(st, rest)
	case "source":
		return v.addressProperty(st.info.SourceAddress, defaultSourceAddress, rest)
	case "destination":
		return v.addressProperty(st.info.DestinationAddress, defaultDestinationAddress, rest)
	}
	return nil, StatusNotFound
}

// text returns s as a property value when the path ends here.
func (v *VM) text(s, rest string) ([]byte, Status) {
	if rest != "" {
		return nil, StatusNotFound
	}
	v.pbuf = append(v.pbuf[:0], s...)
	return v.pbuf, StatusOK
}

// int64Value encodes an integer property: 8 bytes, little-endian (§6).
func (v *VM) int64Value(n int64) ([]byte, Status) {
	v.pbuf = binary.LittleEndian.AppendUint64(v.pbuf[:0], uint64(n))
	return v.pbuf, StatusOK
}

func (v *VM) xdsProperty(st *Stream, rest string) ([]byte, Status) {
	field, sub, _ := strings.Cut(rest, "\x00")
	node := &v.p.cfg.Node
	switch field {
	case "route_name", "cluster_name":
		if st == nil || sub != "" {
			return nil, StatusNotFound
		}
		s := st.info.RouteName
		if field == "cluster_name" {
			s = st.info.ClusterName
		}
		if s == "" {
			return nil, StatusNotFound
		}
		return v.text(s, "")
	case "node":
		key, subsub, _ := strings.Cut(sub, "\x00")
		switch key {
		case "":
			v.pbuf = appendNodeProto(v.pbuf[:0], node)
			return v.pbuf, StatusOK
		case "id":
			return v.text(node.ID, subsub)
		case "cluster":
			return v.text(node.Cluster, subsub)
		case "metadata":
			if subsub == "" {
				v.pbuf = appendMetadataProto(v.pbuf[:0], node.Metadata)
				return v.pbuf, StatusOK
			}
			if val, ok := node.Metadata[subsub]; ok {
				return v.text(val, "")
			}
		}
	}
	return nil, StatusNotFound
}

func (v *VM) requestProperty(st *Stream, rest string) ([]byte, Status) {
	field, sub, _ := strings.Cut(rest, "\x00")
	h := st.reqHeaders
	get := func(name string) ([]byte, Status) {
		val, ok := h.Get(name)
		if !ok {
			return nil, StatusNotFound
		}
		return v.text(val, sub)
	}
	switch field {
	case "path":
		return get(":path")
	case "url_path", "query":
		p, ok := h.Get(":path")
		if !ok {
			return nil, StatusNotFound
		}
		path, query, _ := strings.Cut(p, "?")
		if field == "query" {
			return v.text(query, sub)
		}
		return v.text(path, sub)
	case "host":
		return get(":authority")
	case "method":
		return get(":method")
	case "scheme":
		return get(":scheme")
	case "id":
		return get("x-request-id")
	case "protocol":
		p := st.info.Protocol
		if p == "" {
			p = defaultProtocol
		}
		return v.text(p, sub)
	case "time":
		if sub != "" {
			return nil, StatusNotFound
		}
		return v.int64Value(st.start.UnixNano())
	case "headers":
		return v.headersProperty(h, sub)
	}
	return nil, StatusNotFound
}

func (v *VM) responseProperty(st *Stream, rest string) ([]byte, Status) {
	if !st.responseStarted {
		return nil, StatusNotFound
	}
	field, sub, _ := strings.Cut(rest, "\x00")
	switch field {
	case "code":
		s, _ := st.respHeaders.Get(":status")
		code, err := strconv.Atoi(s)
		if err != nil || sub != "" {
			return nil, StatusNotFound
		}
		return v.int64Value(int64(code))
	case "headers":
		return v.headersProperty(st.respHeaders, sub)
	}
	return nil, StatusNotFound
}

// headersProperty returns the whole map in the pairs format, or one header with its
// values comma-joined.
func (v *VM) headersProperty(h Headers, name string) ([]byte, Status) {
	if name == "" {
		v.pbuf = appendPairs(v.pbuf[:0], h)
		return v.pbuf, StatusOK
	}
	name = lower(name)
	v.pbuf = v.pbuf[:0]
	found := false
	for _, kv := range h {
		if kv[0] == name {
			if found {
				v.pbuf = append(v.pbuf, ',')
			}
			v.pbuf = append(v.pbuf, kv[1]...)
			found = true
		}
	}
	if !found {
		return nil, StatusNotFound
	}
	return v.pbuf, StatusOK
}

func (v *VM) addressProperty(addr, def, rest string) ([]byte, Status) {
	if addr == "" {
		addr = def
	}
	switch rest {
	case "address":
		return v.text(addr, "")
	case "port":
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, StatusNotFound
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, StatusNotFound
		}
		return v.int64Value(int64(n))
	}
	return nil, StatusNotFound
}

// appendNodeProto appends the binary protobuf of envoy.config.core.v3.Node with its
// id (1), cluster (2) and metadata (3, a google.protobuf.Struct of string values).
func appendNodeProto(dst []byte, n *Node) []byte {
	dst = appendProtoBytes(dst, 1, []byte(n.ID))
	dst = appendProtoBytes(dst, 2, []byte(n.Cluster))
	if len(n.Metadata) > 0 {
		dst = appendProtoBytes(dst, 3, appendMetadataProto(nil, n.Metadata))
	}
	return dst
}

// appendMetadataProto appends a google.protobuf.Struct whose fields (1) map each key to
// a Value with string_value (3), keys sorted.
func appendMetadataProto(dst []byte, md map[string]string) []byte {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := appendProtoBytes(nil, 3, []byte(md[k]))
		entry := appendProtoBytes(nil, 1, []byte(k))
		entry = appendProtoBytes(entry, 2, val)
		dst = appendProtoBytes(dst, 1, entry)
	}
	return dst
}

// appendProtoBytes appends a length-delimited field; empty values are omitted, as
// proto3 does.
func appendProtoBytes(dst []byte, field int, b []byte) []byte {
	if len(b) == 0 {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(field)<<3|2)
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}
