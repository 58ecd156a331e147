package envoy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	headertometadatav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/meshlimit/meshlimit/service/rlsconfig"
)

// The files of the quota-aware routing example, in shippedFiles.
const (
	rlsQuotaRouting = "ratelimit/quota-routing.yaml"
	rlsBackends     = "ratelimit/config/backends.yaml"
)

const (
	headerMutationFilter   = "envoy.filters.http.header_mutation"
	headerToMetadataFilter = "envoy.filters.http.header_to_metadata"
	lbNamespace            = "envoy.lb" // the dynamic metadata the subset load balancer reads
)

// dynamicMetadataRef is a header value that is one %DYNAMIC_METADATA(namespace:key:...)%.
var dynamicMetadataRef = regexp.MustCompile(`^%DYNAMIC_METADATA\(([^:)]+)((?::[^:)]+)*)\)%$`)

// quotaRoute is where the example's filters carry the rate limit service's answer.
type quotaRoute struct {
	header string   // the request header the answer's metadata is copied into
	path   []string // the keys under the rules' metadata that header_mutation reads
	lbKey  string   // the envoy.lb key that header_to_metadata writes the header to
}

// checkQuotaRouting validates quota-routing.yaml and follows the metadata from the rules of
// config/ through its filters to the endpoints of its cluster.
func checkQuotaRouting(b bundle) error {
	return eachRLSManager(b, rlsQuotaRouting, func(bs *bootstrapv3.Bootstrap, rules *rlsconfig.Config, hcm *hcmv3.HttpConnectionManager, rl *ratelimitv3.RateLimit) error {
		q, err := quotaFilters(hcm.GetHttpFilters())
		if err != nil {
			return err
		}
		var errs []error
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if err := checkQuotaRoute(bs, r, q, rules, rl.GetDomain()); err != nil {
					errs = append(errs, fmt.Errorf("route %q: %w", r.GetName(), err))
				}
			}
		}
		return errors.Join(errs...)
	})
}

// quotaFilters reads the header_mutation and header_to_metadata filters, which must come in
// that order between the rate limit filter and the router.
func quotaFilters(filters []*hcmv3.HttpFilter) (quotaRoute, error) {
	names := make([]string, len(filters))
	for i, f := range filters {
		names[i] = f.GetName()
	}
	rl, hm, h2m := slices.Index(names, ratelimitFilter), slices.Index(names, headerMutationFilter), slices.Index(names, headerToMetadataFilter)
	if rl < 0 || hm <= rl || h2m <= hm || h2m >= len(names)-1 {
		return quotaRoute{}, fmt.Errorf("want %s, %s, then %s before the router, got %v", ratelimitFilter, headerMutationFilter, headerToMetadataFilter, names)
	}
	var mut headermutationv3.HeaderMutation
	if err := filters[hm].GetTypedConfig().UnmarshalTo(&mut); err != nil {
		return quotaRoute{}, fmt.Errorf("%s: %w", headerMutationFilter, err)
	}
	q, err := metadataHeader(&mut)
	if err != nil {
		return quotaRoute{}, err
	}
	var h2mConfig headertometadatav3.Config
	if err := filters[h2m].GetTypedConfig().UnmarshalTo(&h2mConfig); err != nil {
		return quotaRoute{}, fmt.Errorf("%s: %w", headerToMetadataFilter, err)
	}
	for _, r := range h2mConfig.GetRequestRules() {
		if r.GetHeader() != q.header {
			continue
		}
		if ns := r.GetOnHeaderPresent().GetMetadataNamespace(); ns != lbNamespace {
			return quotaRoute{}, fmt.Errorf("%s: %s goes to namespace %q: the subset load balancer reads %s", headerToMetadataFilter, q.header, ns, lbNamespace)
		}
		q.lbKey = r.GetOnHeaderPresent().GetKey()
		return q, nil
	}
	return quotaRoute{}, fmt.Errorf("%s: no request rule reads %s", headerToMetadataFilter, q.header)
}

// metadataHeader finds the request header that header_mutation fills from the rate limit
// filter's dynamic metadata, and checks that a client's own header is removed first: else a
// client would pick its backend whenever the service does not answer.
func metadataHeader(m *headermutationv3.HeaderMutation) (quotaRoute, error) {
	removed := map[string]bool{}
	for _, hm := range m.GetMutations().GetRequestMutations() {
		if r := hm.GetRemove(); r != "" {
			removed[strings.ToLower(r)] = true
			continue
		}
		h := hm.GetAppend().GetHeader()
		ref := dynamicMetadataRef.FindStringSubmatch(h.GetValue())
		if ref == nil {
			continue
		}
		path := strings.Split(strings.TrimPrefix(ref[2], ":"), ":")
		switch {
		case ref[1] != ratelimitFilter:
			return quotaRoute{}, fmt.Errorf("%s: %s reads the dynamic metadata of %s: the rate limit filter writes %s", headerMutationFilter, h.GetKey(), ref[1], ratelimitFilter)
		case len(path) < 2 || path[0] != "metadata":
			return quotaRoute{}, fmt.Errorf("%s: %s reads %v: the rules' metadata is under metadata", headerMutationFilter, h.GetKey(), path)
		case !removed[strings.ToLower(h.GetKey())]:
			return quotaRoute{}, fmt.Errorf("%s: remove the client's own %s before setting it, or a client picks its backend when the service does not answer", headerMutationFilter, h.GetKey())
		}
		return quotaRoute{header: strings.ToLower(h.GetKey()), path: path[1:]}, nil
	}
	return quotaRoute{}, fmt.Errorf("%s: no request header is set from %%DYNAMIC_METADATA(%s:metadata:...)%%", headerMutationFilter, ratelimitFilter)
}

// checkQuotaRoute checks a route's rate limits and cluster: on the request, each descriptor is
// a quota-mode limit checked without charging, whose metadata names a backend at q.path; on
// stream done, the backend in q.header is charged under a limit; and each backend names
// endpoints of the route's cluster, which the subset load balancer selects by q.lbKey.
func checkQuotaRoute(bs *bootstrapv3.Bootstrap, r *routev3.Route, q quotaRoute, rules *rlsconfig.Config, domain string) error {
	var errs []error
	var backends []string
	var charges []*routev3.RateLimit
	for i, rl := range r.GetRoute().GetRateLimits() {
		if rl.GetApplyOnStreamDone() {
			charges = append(charges, rl)
			continue
		}
		if n := rl.GetHitsAddend().GetNumber(); n == nil || n.GetValue() != 0 {
			errs = append(errs, fmt.Errorf("rate_limits[%d]: hits_addend must be {number: 0}: else it charges every backend on every request", i))
		}
		es, err := descriptorOf(rl)
		if err != nil {
			errs = append(errs, fmt.Errorf("rate_limits[%d]: %w", i, err))
			continue
		}
		rule, ok := rules.Match(domain, len(es), func(j int) rlsconfig.Entry { return es[j] })
		switch name, isName := metadataAt(rule.Metadata, q.path); {
		case !ok || rule.Limit == nil:
			errs = append(errs, fmt.Errorf("rate_limits[%d] sends %v, which matches no limit of domain %q", i, es, domain))
		case !rule.QuotaMode:
			errs = append(errs, fmt.Errorf("rate_limits[%d] sends %v, whose rule must set quota_mode: else a spent backend refuses the request", i, es))
		case !isName:
			errs = append(errs, fmt.Errorf("rate_limits[%d] sends %v, whose rule's metadata has no string at %s", i, es, strings.Join(q.path, ".")))
		default:
			backends = append(backends, name)
		}
	}
	if len(backends) == 0 {
		return errors.Join(append(errs, errors.New("no descriptor names a backend"))...)
	}
	errs = append(errs, checkCharges(charges, q, backends, rules, domain), checkBackends(bs, r.GetRoute().GetCluster(), q.lbKey, backends))
	return errors.Join(errs...)
}

// metadataAt returns the string at path in m, and whether there is one.
func metadataAt(m rlsconfig.Metadata, path []string) (string, bool) {
	var v any = map[string]any(m)
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		v = mm[k]
	}
	s, ok := v.(string)
	return s, ok
}

// checkCharges checks the stream-done rate limits: one charges the backend in q.header, and
// each backend charged that way matches a limit.
func checkCharges(charges []*routev3.RateLimit, q quotaRoute, backends []string, rules *rlsconfig.Config, domain string) error {
	for _, rl := range charges {
		as := rl.GetActions()
		if len(as) != 1 || strings.ToLower(as[0].GetRequestHeaders().GetHeaderName()) != q.header {
			continue
		}
		var errs []error
		for _, b := range backends {
			e := rlsconfig.Entry{Key: as[0].GetRequestHeaders().GetDescriptorKey(), Value: b}
			if r, ok := rules.Match(domain, 1, func(int) rlsconfig.Entry { return e }); !ok || r.Limit == nil {
				errs = append(errs, fmt.Errorf("on stream done it charges %v, which matches no limit of domain %q", e, domain))
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("no rate limit with apply_on_stream_done charges the backend in %s: the quotas would never be spent", q.header)
}

// checkBackends checks that the subset load balancer of cluster selects by lbKey, falls back
// when the header is absent, and has endpoints for every backend.
func checkBackends(bs *bootstrapv3.Bootstrap, cluster, lbKey string, backends []string) error {
	cl := clusterByName(bs, cluster)
	if cl == nil {
		return fmt.Errorf("cluster %q is not a cluster", cluster)
	}
	sub := cl.GetLbSubsetConfig()
	var errs []error
	if !slices.ContainsFunc(sub.GetSubsetSelectors(), func(s *clusterv3.Cluster_LbSubsetConfig_LbSubsetSelector) bool {
		return slices.Equal(s.GetKeys(), []string{lbKey})
	}) {
		errs = append(errs, fmt.Errorf("cluster %q: no subset selector has keys [%s], the envoy.lb key of the header", cluster, lbKey))
	}
	if sub.GetFallbackPolicy() == clusterv3.Cluster_LbSubsetConfig_NO_FALLBACK {
		errs = append(errs, fmt.Errorf("cluster %q: fallback_policy %v: a request without an answer (the service down) would find no endpoint", cluster, sub.GetFallbackPolicy()))
	}
	served := map[string]bool{}
	for _, le := range cl.GetLoadAssignment().GetEndpoints() {
		for _, e := range le.GetLbEndpoints() {
			served[e.GetMetadata().GetFilterMetadata()[lbNamespace].GetFields()[lbKey].GetStringValue()] = true
		}
	}
	if d := sub.GetDefaultSubset().GetFields()[lbKey].GetStringValue(); sub.GetFallbackPolicy() == clusterv3.Cluster_LbSubsetConfig_DEFAULT_SUBSET && !served[d] {
		errs = append(errs, fmt.Errorf("cluster %q: the default subset %s %q has no endpoint", cluster, lbKey, d))
	}
	for _, b := range backends {
		if !served[b] {
			errs = append(errs, fmt.Errorf("backend %q: no endpoint of cluster %q has %s %s %q", b, cluster, lbNamespace, lbKey, b))
		}
	}
	return errors.Join(errs...)
}
