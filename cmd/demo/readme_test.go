package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README shows an abridged sample of the demo's output: the fenced block that follows the line
// sampleMarker. TestTheREADMEShowsWhatTheDemoPrints holds it to a real run, so that it cannot drift:
//
//   - a line "..." elides any number of lines of the output (none included); the sample's start
//     and end elide what comes before and after it;
//   - every run of lines between two elisions must be printed by the demo as it stands, one line
//     after the other, and the runs in the sample's order;
//   - lines are compared without trailing spaces, after the numbers that vary by design are
//     replaced in both (variable): nothing else may differ.
const sampleMarker = "<!-- demo-sample: TestTheREADMEShowsWhatTheDemoPrints (cmd/demo) checks it -->"

// variable lists the parts of the demo's output that change from run to run by design, each with
// why. The rest is deterministic, however fast the machine runs the demo: the filter and the
// service's store decide on one virtual clock that moves only when the demo moves it, and the slow
// upstream holds the parallel requests until every other one was answered (layers.go).
var variable = []struct {
	re   *regexp.Regexp
	repl string
	why  string
}{
	{regexp.MustCompile(`("api-hourly";r=\d+;t=)\d+`), "${1}T",
		"the sliding window counter's effective window t depends on where in the hour the demo starts"},
	{regexp.MustCompile(`(shed with 503 \(Retry-After: )\d+\)`), "${1}N)",
		"a shed request's Retry-After is 1s plus a random 0 to 2s (shed.retry_after_jitter, default 2s)"},
}

func normalize(line string) string {
	line = strings.TrimRight(line, " \t")
	for _, v := range variable {
		line = v.re.ReplaceAllString(line, v.repl)
	}
	return line
}

// readmeSample returns the lines of the README's sample and the README line of the first.
func readmeSample(t *testing.T) ([]string, int) {
	data, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != sampleMarker {
			continue
		}
		require.Less(t, i+1, len(lines))
		require.True(t, strings.HasPrefix(lines[i+1], "```"), "README.md:%d: the sample's fence must follow its marker", i+2)
		for j := i + 2; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "```") {
				return lines[i+2 : j], i + 3
			}
		}
		require.Failf(t, "unclosed", "README.md:%d: the sample's fence is not closed", i+2)
	}
	require.Failf(t, "no sample", "README.md has no line %q", sampleMarker)
	return nil, 0
}

// sampleMismatches compares a sample (its first line at README line first) with an output, as
// described at sampleMarker, and returns one message per run of the sample that the output does
// not print.
func sampleMismatches(sample []string, first int, output string) []string {
	out := strings.Split(output, "\n")
	for i := range out {
		out[i] = normalize(out[i])
	}
	var problems []string
	cursor := 0
	for start := 0; start < len(sample); {
		end := start
		for end < len(sample) && strings.TrimSpace(sample[end]) != "..." {
			end++
		}
		run := sample[start:end]
		if len(run) > 0 {
			at, matched := -1, -1 // the best place: the longest prefix of the run printed there
			for i := cursor; i < len(out); i++ {
				n := 0
				for n < len(run) && i+n < len(out) && out[i+n] == normalize(run[n]) {
					n++
				}
				if n > matched {
					at, matched = i, n
				}
				if n == len(run) {
					break
				}
			}
			if matched < len(run) {
				printed := "(the output ends)"
				if matched > 0 && at+matched < len(out) {
					printed = fmt.Sprintf("%q", out[at+matched])
				} else if matched <= 0 {
					printed = "(no such line after the lines before it)"
				}
				problems = append(problems, fmt.Sprintf("README.md:%d: %q: the demo printed %s", first+start+max(matched, 0), sample[start+max(matched, 0)], printed))
			}
			if matched > 0 {
				cursor = at + matched
			}
		}
		start = end + 1
	}
	return problems
}

func TestTheREADMEShowsWhatTheDemoPrints(t *testing.T) {
	sample, first := readmeSample(t)
	require.NotEmpty(t, sample)
	for _, must := range []string{"Rule tokens: ", "POST /signin (198.51.100.50, reset) allowed", "Priority shedding", "Concurrency limit"} {
		assert.Contains(t, strings.Join(sample, "\n"), must, "the sample shows every section of the demo")
	}
	assert.Empty(t, sampleMismatches(sample, first, demoOutput(t)),
		"the README's sample of the demo's output is not what the demo prints: copy the lines from `make demo`")
}

func TestTheSampleCheckAllowsOnlyElisionsAndTheNumbersThatVary(t *testing.T) {
	output := strings.Join([]string{
		"header",
		`  GET /api/orders    200  RateLimit: "api-burst";r=7;t=1, "api-hourly";r=999;t=822`,
		`  GET /api/orders    200  RateLimit: "api-burst";r=6;t=1, "api-hourly";r=998;t=822`,
		`  GET /api/orders    429  RateLimit: "api-burst";r=0;t=1, "api-hourly";r=998;t=822  Retry-After: 1`,
		"",
		"  sheddable: 7 admitted, 3 shed with 503 (Retry-After: 3)",
		"  critical:  3 admitted, 0 shed",
		"footer",
	}, "\n")
	for _, tc := range []struct {
		name   string
		sample []string
		ok     bool
	}{
		{"the output itself matches", strings.Split(output, "\n"), true},
		{"elided lines match", []string{"header", "...", "  critical:  3 admitted, 0 shed"}, true},
		{"another hour's t and another jitter match",
			[]string{`  GET /api/orders    200  RateLimit: "api-burst";r=7;t=1, "api-hourly";r=999;t=1200`, "...",
				"  sheddable: 7 admitted, 3 shed with 503 (Retry-After: 2)"}, true},
		{"trailing spaces do not count", []string{"  critical:  3 admitted, 0 shed   "}, true},
		{"another remaining quota does not match",
			[]string{`  GET /api/orders    200  RateLimit: "api-burst";r=5;t=1, "api-hourly";r=999;t=822`}, false},
		{"another t of the burst limit does not match",
			[]string{`  GET /api/orders    429  RateLimit: "api-burst";r=0;t=2, "api-hourly";r=998;t=822  Retry-After: 1`}, false},
		{"another count of shed requests does not match", []string{"  sheddable: 7 admitted, 4 shed with 503 (Retry-After: 3)"}, false},
		{"lines skipped without an elision do not match", []string{"header", "", "footer"}, false},
		{"lines out of order do not match", []string{"footer", "...", "header"}, false},
		{"a line the demo never prints does not match", []string{"header", "...", "a line of an older demo"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := sampleMismatches(tc.sample, 1, output)
			if tc.ok {
				assert.Empty(t, problems)
			} else {
				assert.NotEmpty(t, problems)
			}
		})
	}
}
