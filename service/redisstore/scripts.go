package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/service"
)

//go:embed lua/*.lua
var luaFS embed.FS

// scripts are the store's Lua scripts. Every node is given the sources of those a check runs
// with SCRIPT LOAD (at start and by Ping), so that no check meets NOSCRIPT; the reset log's,
// off the proxies' request path, are loaded by their first call.
type scripts struct {
	decide  [len(algorithms.Kinds) + 1]*rueidis.Lua // by Kind
	full    [len(algorithms.Kinds) + 1]*rueidis.Lua // by Kind: decide an existing key while Redis is full
	settle  [len(algorithms.Kinds) + 1]*rueidis.Lua // by Kind: a settle, and the undo of the kinds that settle
	undo    [len(algorithms.Kinds) + 1]*rueidis.Lua // by Kind, for the kinds that do not settle: an undo
	all     *rueidis.Lua                            // the decisions of a check's descriptors in one call
	permit  [3]*rueidis.Lua                         // by service.PermitOp
	resets  [2]*rueidis.Lua                         // append, read
	sources []string                                // of decide, settle and permit
}

// permitScripts are the files of the permit scripts, by service.PermitOp.
var permitScripts = [3]string{
	service.PermitAcquire: "permit_acquire.lua",
	service.PermitRenew:   "permit_renew.lua",
	service.PermitRelease: "permit_release.lua",
}

func newScripts() (scripts, error) {
	var sc scripts
	add := func(src string, err error) (*rueidis.Lua, error) {
		if err != nil {
			return nil, err
		}
		sc.sources = append(sc.sources, src)
		return rueidis.NewLuaScript(src), nil
	}
	var err error
	for _, k := range algorithms.Kinds {
		if sc.decide[k], err = add(script(k)); err != nil {
			return scripts{}, err
		}
		if sc.full[k], err = add(fullScript(k)); err != nil {
			return scripts{}, err
		}
		if !k.Settles() {
			if sc.undo[k], err = add(undoScript(k)); err != nil {
				return scripts{}, err
			}
			continue
		}
		if sc.settle[k], err = add(settleScript(k)); err != nil {
			return scripts{}, err
		}
	}
	if sc.all, err = add(decideAllScript()); err != nil {
		return scripts{}, err
	}
	for op, name := range permitScripts {
		if sc.permit[op], err = add(composeScript("", name)); err != nil {
			return scripts{}, err
		}
	}
	for i, name := range []string{"resets_append.lua", "resets_read.lua"} {
		src, err := composeScript("", name)
		if err != nil {
			return scripts{}, err
		}
		sc.resets[i] = rueidis.NewLuaScript(src)
	}
	return sc, nil
}

// script returns the Lua source that decides kind: lua/lib.lua followed by the algorithm's
// body (token and leaky bucket share lua/gcra_state.lua and lua/gcra.lua, selected by a
// one-line prefix).
func script(kind algorithms.Kind) (string, error) {
	switch kind {
	case algorithms.TokenBucket:
		return composeScript("local LEAKY = false\n", "lib.lua", "gcra_state.lua", "gcra.lua")
	case algorithms.LeakyBucket:
		return composeScript("local LEAKY = true\n", "lib.lua", "gcra_state.lua", "gcra.lua")
	case algorithms.FixedWindow:
		return composeScript("", "lib.lua", "calendar.lua", "fixed_window_state.lua", "fixed_window.lua")
	case algorithms.SlidingLog:
		return composeScript("", "lib.lua", "sliding_log_index.lua", "sliding_log.lua")
	case algorithms.SlidingWindow:
		return composeScript("", "lib.lua", "sliding_window.lua")
	}
	return "", fmt.Errorf("redisstore: no script for %v", kind)
}

// decideAllScript returns the Lua source that decides a check's descriptors in one call: each
// kind's script(kind) as the body of a function decide[kind], then lua/decide_all.lua.
func decideAllScript() (string, error) {
	var b strings.Builder
	b.WriteString("local decide = {}\n")
	for _, k := range algorithms.Kinds {
		src, err := script(k)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "decide[%d] = function(KEYS, ARGV)\n%s\nend\n", int(k), src)
	}
	tail, err := composeScript("", "decide_all.lua")
	if err != nil {
		return "", err
	}
	b.WriteString(tail)
	return b.String(), nil
}

// whileFull starts the script that decides an existing key while Redis refuses writes (OOM):
// allowed to run then (allow-oom), it refuses a key that does not exist, so that only the
// keys Redis already holds are updated (a few bytes each, in place) and memory stays bounded.
const whileFull = "#!lua flags=allow-oom\n" +
	"if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('OOM a new key while Redis is full') end\n"

// fullScript returns the Lua source that decides kind for an existing key while Redis is full:
// whileFull, then script(kind).
func fullScript(kind algorithms.Kind) (string, error) {
	src, err := script(kind)
	return whileFull + src, err
}

// settleScript returns the Lua source that settles a cost of kind (see lua/lib.lua): lib.lua
// followed by the algorithm's settle body.
func settleScript(kind algorithms.Kind) (string, error) {
	switch kind {
	case algorithms.TokenBucket:
		return composeScript("local LEAKY = false\n", "lib.lua", "gcra_state.lua", "gcra_settle.lua")
	case algorithms.LeakyBucket:
		return composeScript("local LEAKY = true\n", "lib.lua", "gcra_state.lua", "gcra_settle.lua")
	case algorithms.FixedWindow:
		return composeScript("", "lib.lua", "calendar.lua", "fixed_window_state.lua", "taken_at.lua", "fixed_window_settle.lua")
	}
	return "", fmt.Errorf("redisstore: %v does not settle a cost", kind)
}

// undoScript returns the Lua source that gives back an admission of a kind that does not settle
// (see lua/lib.lua; the kinds that settle undo with their settle script: the undo of a bucket or a
// fixed window is the refund of a reservation of that age).
func undoScript(kind algorithms.Kind) (string, error) {
	switch kind {
	case algorithms.SlidingLog:
		return composeScript("", "lib.lua", "sliding_log_index.lua", "taken_at.lua", "sliding_log_undo.lua")
	case algorithms.SlidingWindow:
		return composeScript("", "lib.lua", "taken_at.lua", "sliding_window_undo.lua")
	}
	return "", fmt.Errorf("redisstore: %v has no undo script", kind)
}

// composeScript returns prefix followed by the named files of lua/.
func composeScript(prefix string, files ...string) (string, error) {
	var b strings.Builder
	b.WriteString(prefix)
	for _, f := range files {
		src, err := luaFS.ReadFile("lua/" + f)
		if err != nil {
			return "", err
		}
		b.Write(src)
	}
	return b.String(), nil
}

// loadScripts loads the scripts on every node.
func (s *Store) loadScripts(ctx context.Context) error {
	for addr, n := range s.client.Nodes() {
		if err := loadScriptsOn(ctx, n, s.scripts.sources); err != nil {
			return fmt.Errorf("redisstore: %s: loading the scripts: %w", addr, err)
		}
	}
	return nil
}

// loadScriptsOn loads, with SCRIPT LOAD, the sources that node n does not hold (SCRIPT EXISTS):
// all of them in one pipelined round trip, so that a probe after a restart of Redis costs two
// round trips whatever the number of scripts.
func loadScriptsOn(ctx context.Context, n rueidis.Client, sources []string) error {
	shas := make([]string, len(sources))
	for i, src := range sources {
		sum := sha1.Sum([]byte(src)) // the digest EVALSHA names a script by
		shas[i] = hex.EncodeToString(sum[:])
	}
	exists, err := n.Do(ctx, n.B().ScriptExists().Sha1(shas...).Build()).AsIntSlice()
	if err != nil {
		return err
	}
	var loads rueidis.Commands
	for i, e := range exists {
		if e != 1 {
			loads = append(loads, n.B().ScriptLoad().Script(sources[i]).Build())
		}
	}
	if len(loads) == 0 {
		return nil
	}
	for _, r := range n.DoMulti(ctx, loads...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}
