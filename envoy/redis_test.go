package envoy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// redisMemory is the memory setting every shipped Redis must have. An evicted key is a
// counter that starts over, so any eviction policy hands a flood of distinct keys a fresh
// quota; noeviction refuses writes when Redis is full: the service still decides the keys Redis
// holds, reports new ones (503, store_full), and their rules' failure_mode applies
// (service/API.md, "Redis memory").
const redisPolicy = "noeviction"

// checkRedisMemory checks that every shipped Redis runs with maxmemory-policy noeviction and a
// maxmemory below its container's memory limit, so that it refuses writes before the kernel
// kills it.
func checkRedisMemory(b bundle) error {
	var errs []error
	objs, err := loadKubernetes(b)
	if err != nil {
		return err
	}
	for _, d := range objs.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !strings.HasPrefix(c.Image, "redis:") {
				continue
			}
			limit := c.Resources.Limits.Memory()
			if err := redisMemoryArgs(c.Args, limit.Value()); err != nil {
				errs = append(errs, fmt.Errorf("istio/redis.yaml: deployment %s: %w", d.Name, err))
			}
		}
	}
	c, err := loadCompose(b)
	if err != nil {
		return err
	}
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "redis:") {
			if err := redisMemoryArgs(s.Command, 0); err != nil {
				errs = append(errs, fmt.Errorf("compose.yaml: service %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// redisMemoryArgs checks the --maxmemory and --maxmemory-policy arguments of a redis-server
// command line; limit, when > 0, is the container's memory limit in bytes.
func redisMemoryArgs(args []string, limit int64) error {
	value := func(flag string) string {
		if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	if p := value("--maxmemory-policy"); p != redisPolicy {
		return fmt.Errorf("--maxmemory-policy %q: want %s (an evicted key is a counter that starts over)", p, redisPolicy)
	}
	maxmemory, err := redisBytes(value("--maxmemory"))
	if err != nil || maxmemory <= 0 {
		return fmt.Errorf("--maxmemory %q: want a size such as 200mb", value("--maxmemory"))
	}
	if limit > 0 && maxmemory >= limit {
		return fmt.Errorf("--maxmemory %s is not below the container's memory limit %s", value("--maxmemory"), resource.NewQuantity(limit, resource.BinarySI))
	}
	return nil
}

// redisBytes parses a Redis memory size: a number with an optional unit (k, kb, m, mb, g, gb;
// "kb" is 1024 bytes, "k" 1000).
func redisBytes(s string) (int64, error) {
	s = strings.ToLower(s)
	units := []struct {
		suffix string
		n      int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}}
	mult := int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}
