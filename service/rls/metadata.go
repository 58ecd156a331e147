package rls

import (
	"strconv"
	"strings"

	rlext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is the dynamic_metadata of envoyproxy/ratelimit's answer to req (with
// RESPONSE_DYNAMIC_METADATA=true), whose descriptors were decided as sts by plans:
//
//	domain       the request's domain
//	descriptors  per descriptor of the request, in order: entries, each "key=value";
//	             limit, Envoy's override in protobuf's text format, when it has one;
//	             hitsAddend, when it has its own
//	hitsAddend   the request's hits_addend, when not 0
//	metadata     the metadata of the rules of the descriptors that passed (see passedMetadata),
//	             when there is any
//
// It is built afresh for each answer: nothing of the configuration is shared with it.
func dynamicMetadata(req *pb.RateLimitRequest, sts []*pb.RateLimitResponse_DescriptorStatus, plans []plan) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d != nil {
			descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
		}
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if m := passedMetadata(sts, plans); m != nil {
		fields["metadata"] = structpb.NewStructValue(m)
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct is one descriptor of dynamicMetadata.
func descriptorStruct(d *rlext.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(overrideText(o))
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// overrideText writes an override as the peer does (its String(), protobuf's text format): the
// fields that are set, in field order, "requests_per_unit:5 unit:MINUTE". Protobuf varies the
// spacing of String() on purpose from build to build; this is always one space.
func overrideText(o *rlext.RateLimitDescriptor_RateLimitOverride) string {
	var parts []string
	if n := o.GetRequestsPerUnit(); n != 0 {
		parts = append(parts, "requests_per_unit:"+strconv.FormatUint(uint64(n), 10))
	}
	if u := o.GetUnit(); u != 0 {
		parts = append(parts, "unit:"+u.String())
	}
	return strings.Join(parts, " ")
}

// passedMetadata merges the metadata of the rules of the descriptors that passed: those with a
// limit from a rule (not unlimited, not replaced, not an override) answered OK, which includes
// shadow mode over its limit and excludes quota mode over it. In request order, a key not yet
// present is added, and a key present in both as mappings is merged the same way, so the first
// descriptor's value wins everywhere else (lists are not merged). It returns nil when none has
// any.
func passedMetadata(sts []*pb.RateLimitResponse_DescriptorStatus, plans []plan) *structpb.Struct {
	var out *structpb.Struct
	for i := range plans {
		p := &plans[i]
		if p.kind != planLimit || len(p.rule.Metadata) == 0 || sts[i].GetCode() != pb.RateLimitResponse_OK {
			continue
		}
		if out == nil {
			out = &structpb.Struct{Fields: make(map[string]*structpb.Value, len(p.rule.Metadata))}
		}
		mergeFirstWins(out, p.rule.Metadata)
	}
	return out
}

// mergeFirstWins merges src into dst: a key dst lacks is added (a copy), a key both hold as
// mappings is merged in turn, and any other key keeps dst's value.
func mergeFirstWins(dst *structpb.Struct, src map[string]any) {
	for k, v := range src {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = structValue(v)
			continue
		}
		if cs, sm := cur.GetStructValue(), asMap(v); cs != nil && sm != nil {
			mergeFirstWins(cs, sm)
		}
	}
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// structValue converts a value of rlsconfig.Metadata (the JSON data model) into a new Value.
func structValue(v any) *structpb.Value {
	switch v := v.(type) {
	case bool:
		return structpb.NewBoolValue(v)
	case float64:
		return structpb.NewNumberValue(v)
	case string:
		return structpb.NewStringValue(v)
	case []any:
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(v))}
		for i, e := range v {
			l.Values[i] = structValue(e)
		}
		return structpb.NewListValue(l)
	case map[string]any:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(v))}
		for k, e := range v {
			s.Fields[k] = structValue(e)
		}
		return structpb.NewStructValue(s)
	}
	return structpb.NewNullValue() // nil, the only other value Metadata holds
}
