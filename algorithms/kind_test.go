package algorithms

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TakesBurst and MaxQuota say what Validate accepts, so that callers (the decision service,
// the configuration compiler) need not restate it.
func TestKindBoundsAgreeWithValidate(t *testing.T) {
	for _, k := range Kinds {
		withBurst := Limit{Kind: k, Quota: 10, Window: time.Second, Burst: 20}
		assert.Equal(t, k.TakesBurst(), withBurst.Validate() == nil, "%v with a burst", k)
		atMax := Limit{Kind: k, Quota: k.MaxQuota(), Window: time.Second}
		assert.NoError(t, atMax.Validate(), "%v at its largest quota", k)
		atMax.Quota++
		assert.Error(t, atMax.Validate(), "%v above its largest quota", k)
	}
	assert.False(t, Kind(0).TakesBurst(), "an invalid Kind takes no burst")
}
