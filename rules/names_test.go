package rules

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The documented name patterns, kept here as the oracle the byte loops of compile.go are checked
// against (and that fuzz_test.go checks compiled configurations with).
var (
	ruleNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	policyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

var nameSamples = []string{
	"", "a", "0", "api", "per-ip", "per_ip", "api.v2", "API", "Api-1", "-a", "_a", ".a", "a-", "a_", "a.",
	"a b", "a/b", "é", "a\x00", "a\n", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
	strings.Repeat("A", 64), "9" + strings.Repeat(".", 63), "9" + strings.Repeat(".", 64),
}

func TestARuleNameIsAcceptedExactlyWhenItMatchesTheDocumentedPattern(t *testing.T) {
	for _, s := range nameSamples {
		assert.Equal(t, ruleNameRE.MatchString(s), validRuleName(s), "%q", s)
	}
}

func TestAPolicyNameIsAcceptedExactlyWhenItMatchesTheDocumentedPattern(t *testing.T) {
	for _, s := range nameSamples {
		assert.Equal(t, policyNameRE.MatchString(s), validPolicyName(s), "%q", s)
	}
}

func FuzzNameChecksAgreeWithTheirPatterns(f *testing.F) {
	for _, s := range nameSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ruleNameRE.MatchString(s) != validRuleName(s) {
			t.Fatalf("rule name %q: pattern %t, check %t", s, ruleNameRE.MatchString(s), validRuleName(s))
		}
		if policyNameRE.MatchString(s) != validPolicyName(s) {
			t.Fatalf("policy name %q: pattern %t, check %t", s, policyNameRE.MatchString(s), validPolicyName(s))
		}
	})
}
