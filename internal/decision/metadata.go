package decision

import (
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata builds the response's dynamic metadata as
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does: domain, the
// request's descriptors (entries as "key=value", limit, hitsAddend),
// the request's hitsAddend when not 0, and under "metadata" the
// configured metadata of every descriptor that is within its limit,
// merged (the first descriptor's value wins where two give the same
// field, nested mappings merged).
func dynamicMetadata(req *rlspb.RateLimitRequest, sts []*rlspb.RateLimitResponse_DescriptorStatus, ms []match) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(prototext.Format(l))
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, m := range ms {
		if m.rule == nil || m.rule.unlimited || m.rule.metadata == nil || sts[i].Code == rlspb.RateLimitResponse_OVER_LIMIT {
			continue
		}
		mergeStruct(passed, m.rule.metadata)
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field dst lacks is added, two
// mappings are merged, otherwise dst keeps its value.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if cs, vs := cur.GetStructValue(), v.GetStructValue(); cs != nil && vs != nil {
			// Copy before merging into it: cur may be a configured value.
			cp := &structpb.Struct{Fields: map[string]*structpb.Value{}}
			mergeStruct(cp, cs)
			mergeStruct(cp, vs)
			dst.Fields[k] = structpb.NewStructValue(cp)
		}
	}
}
