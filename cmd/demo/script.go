package main

import (
	"fmt"
	"strings"

	"github.com/meshlimit/meshlimit/rules"
)

// scriptRules are the rules the demo's script drives, by name, in the order it drives them: its
// requests, resets and expected answers are written for demo.json's rules.
var scriptRules = []string{"api-per-ip", "signin", "search-per-user", "login", "gpu-per-tenant", "tokens"}

// checkScript reports a configuration the script cannot run on: one that does not parse, has no
// priority shedder, or lacks one of scriptRules (all of them named at once).
func checkScript(cfg []byte) error {
	c, err := rules.ParseConfig(cfg)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, r := range c.Rules() {
		have[r.Name] = true
	}
	var missing []string
	for _, name := range scriptRules {
		if !have[name] {
			missing = append(missing, name)
		}
	}
	if len(c.Shedders) == 0 {
		missing = append(missing, "a shed object")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the demo's script drives the rules %s and a priority shedder (those of cmd/demo/demo.json); this configuration has no %s: start from cmd/demo/demo.json",
			strings.Join(scriptRules, ", "), strings.Join(missing, ", "))
	}
	return nil
}
