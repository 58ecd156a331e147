package rules

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A limit without a name takes its rule's name as its policy name, so a duplicate rule name used
// to be reported twice: once as the rule's name, once as its limit's policy name. It is reported
// once; a policy named by the configuration still collides on its own.
func TestADuplicateRuleNameIsReportedOnce(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "a second rule of the same name with one unnamed limit",
			doc:  `{"rules": [{"name": "a", "limits": [{"rate": "10/s"}]}, {"name": "a", "limits": [{"rate": "1/s"}]}]}`,
			want: []string{`rules[1].name: "a" is already the name of rules[0]`},
		},
		{
			name: "a second rule of the same name with two unnamed limits",
			doc: `{"rules": [{"name": "a", "limits": [{"rate": "10/s"}, {"rate": "100/m"}]},
				{"name": "a", "limits": [{"rate": "1/s"}, {"rate": "10/m"}]}]}`,
			want: []string{`rules[1].name: "a" is already the name of rules[0]`},
		},
		{
			name: "a duplicate rule whose named limit reuses another policy's name",
			doc: `{"rules": [{"name": "a", "limits": [{"name": "shared", "rate": "10/s"}]},
				{"name": "a", "limits": [{"name": "shared", "rate": "1/s"}]}]}`,
			want: []string{
				`rules[1].limits[0].name: policy name "shared" is already used by rules[0].limits[0]`,
				`rules[1].name: "a" is already the name of rules[0]`,
			},
		},
		{
			name: "a rule named after another rule's policy",
			doc: `{"rules": [{"name": "a", "limits": [{"name": "b", "rate": "10/s"}]},
				{"name": "b", "limits": [{"rate": "1/s"}]}]}`,
			want: []string{`rules[1].limits[0].name: policy name "b" is already used by rules[0].limits[0]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, errorLines(t, tt.doc))
		})
	}
}
