package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/meshlimit/meshlimit/internal/envoyhost"
)

// The token budget: rule tokens (demo.json) gives each user 1000 LLM tokens an hour. A completion
// reserves its max_tokens when it is admitted, and when the answer comes the reservation is settled
// to the usage.total_tokens the model reports: the unused part comes back, an over-run is charged.
// The budget section sends completions through a second listener of the same filter (as an Envoy
// with a route to a model server), to a fake model that uses the tokens the request's
// x-demo-uses header says.

// budgetCall is one completion of the section: its reservation and what the model uses.
type budgetCall struct{ maxTokens, uses int }

// budget runs the token-budget section on plugin p and prints a line per completion and a summary.
func budget(ctx context.Context, out io.Writer, client *http.Client, p *envoyhost.Plugin) error {
	modelAddr, stopModel, err := serve(http.HandlerFunc(fakeModel))
	if err != nil {
		return err
	}
	defer stopModel()
	proxyAddr, stopProxy, err := serve(&envoyhost.HTTPProxy{Plugin: p, Upstream: "http://" + modelAddr})
	if err != nil {
		return err
	}
	defer stopProxy()
	fmt.Fprintln(out, "\nRule tokens: 1000 LLM tokens/h per user, reserved from max_tokens, settled from usage.total_tokens:")
	calls := []budgetCall{{400, 120}, {800, 800}, {200, 0}, {50, 75}}
	for _, c := range calls {
		if err := budgetPost(ctx, out, client, proxyAddr, c); err != nil {
			return err
		}
	}
	m := metricsOf(p)
	fmt.Fprintf(out, "  settled %d completions: %d tokens refunded, %d charged beyond their reservations\n",
		m["meshlimit.rule.tokens.settled"].Value, m["meshlimit.rule.tokens.settle_refund"].Value, m["meshlimit.rule.tokens.settle_overrun"].Value)
	return nil
}

// budgetPost sends one completion of user carol and prints what became of it.
func budgetPost(ctx context.Context, out io.Writer, client *http.Client, proxyAddr string, c budgetCall) error {
	body := fmt.Sprintf(`{"model": "demo", "max_tokens": %d, "messages": [{"role": "user", "content": "hi"}]}`, c.maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+proxyAddr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-user", "carol")
	req.Header.Set("x-demo-uses", fmt.Sprint(c.uses))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	label := fmt.Sprintf("max_tokens %d", c.maxTokens)
	if resp.StatusCode == http.StatusTooManyRequests {
		fmt.Fprintf(out, "  %-16s %d  the reservation does not fit what is left%s\n", label, resp.StatusCode, retryAfter(resp))
		return nil
	}
	what := "as reserved"
	switch {
	case c.uses < c.maxTokens:
		what = fmt.Sprintf("%d refunded", c.maxTokens-c.uses)
	case c.uses > c.maxTokens:
		what = fmt.Sprintf("%d over-run charged", c.uses-c.maxTokens)
	}
	fmt.Fprintf(out, "  %-16s %d  used %3d: %-19s RateLimit at admission: %s\n", label, resp.StatusCode, c.uses, what, resp.Header.Get("RateLimit"))
	return nil
}

// fakeModel answers a completion with the usage its x-demo-uses header asks for.
func fakeModel(w http.ResponseWriter, r *http.Request) {
	var uses int
	_, _ = fmt.Sscan(r.Header.Get("x-demo-uses"), &uses)
	w.Header().Set("content-type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "demo-1", "choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": "hello"}}},
		"usage": map[string]int{"prompt_tokens": 1, "total_tokens": uses},
	})
}
