package filter

import (
	"github.com/meshlimit/meshlimit/rules"
	"github.com/meshlimit/meshlimit/sharedstate"
)

// partitionOf returns the pk of what decided rule r's key: the key's own partition, or, when the
// key was decided in the overflow state that the keys without a slot share (placement Overflow),
// that state's one partition (rules.Response.OverflowPartition): one count, one pk.
func partitionOf(resp *rules.Response, r *rules.Rule, key []byte, placement sharedstate.Placement) rules.PartitionKey {
	if placement == sharedstate.Overflow {
		return resp.OverflowPartition(r)
	}
	return resp.Partition(r, key)
}
