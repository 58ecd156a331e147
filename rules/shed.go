package rules

import (
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/shed"
)

// shedJSON is the top-level shed object: priority load shedding in front of the upstream
// (docs/shedding.md). It sets capacity or adaptive, not both.
type shedJSON struct {
	// Classes, highest priority first, 1 to 8. Default critical (reserve 100), default
	// (reserve 200), sheddable (reserve 0).
	Classes []shedClassJSON `json:"classes"`
	// DefaultClass is the class of a request that names none or an unknown one. Default
	// "default" with the default classes, else required.
	DefaultClass string `json:"default_class"`
	// ClassHeader names the request header whose value is the class name (exact). Default:
	// none.
	ClassHeader string `json:"class_header"`
	// RouteClasses maps Envoy route names to classes; a route listed here wins over the
	// header. Default: none.
	RouteClasses map[string]string `json:"route_classes"`
	// Capacity is a configured capacity: requests in flight, 1 to shed.MaxCapacity.
	Capacity optInt `json:"capacity"`
	// Adaptive computes the capacity from the upstream's latency.
	Adaptive *adaptiveJSON `json:"adaptive"`
	// Shadow makes the shedder decide and count but never shed. Default false.
	Shadow bool `json:"shadow"`
	// RetryAfter is the Retry-After of a shed request before jitter, 1s to 1h. Default "1s".
	RetryAfter string `json:"retry_after"`
	// RetryAfterJitter is the most Retry-After is randomly lengthened by, 0 to 1h. Default
	// "2s".
	RetryAfterJitter string `json:"retry_after_jitter"`
}

// shedClassJSON is one element of shed.classes.
type shedClassJSON struct {
	Name    string `json:"name"`
	Reserve optInt `json:"reserve"`
}

// adaptiveJSON is shed.adaptive: the gradient controller's parameters (docs/shedding.md);
// every field is optional, with shed.DefaultGradient's values.
type adaptiveJSON struct {
	MinLimit      optInt `json:"min_limit"`
	MaxLimit      optInt `json:"max_limit"`
	InitialLimit  optInt `json:"initial_limit"`
	Interval      string `json:"interval"`
	Percentile    optInt `json:"percentile"`
	Buffer        optInt `json:"buffer"`
	Smoothing     optInt `json:"smoothing"`
	Objective     string `json:"objective"`
	Backoff       optInt `json:"backoff"`
	ProbeInterval string `json:"probe_interval"`
	ProbeJitter   optInt `json:"probe_jitter"`
	ProbeLimit    optInt `json:"probe_limit"`
	ProbeSamples  optInt `json:"probe_samples"`
}

// Shed is the compiled shed section.
type Shed struct {
	// Policy holds the classes and decides admissions.
	Policy shed.Policy
	// Classes are the class names, highest priority first (metric names use them).
	Classes []string
	// ClassHeader is the lower-case header naming the class, or "".
	ClassHeader string
	// Capacity is the configured capacity, or 0 when Adaptive is set.
	Capacity int64
	// Adaptive is the gradient controller, or nil for a configured capacity.
	Adaptive *shed.Gradient
	// Shadow: decide and count, never shed.
	Shadow bool
	// RetryAfter and RetryAfterJitter make the Retry-After of a shed request.
	RetryAfter, RetryAfterJitter time.Duration

	routes map[string]int
}

// Class returns the class index of a request: its route's class, else its class header's,
// else the default class.
func (s *Shed) Class(req Request) int {
	if len(s.routes) > 0 {
		if c, ok := s.routes[req.RouteName()]; ok {
			return c
		}
	}
	if s.ClassHeader != "" {
		if v, ok := req.HeaderValue(s.ClassHeader, 0); ok {
			return s.Policy.Class(v)
		}
	}
	return s.Policy.Class("")
}

func (v *validator) shed(sj *shedJSON) *Shed {
	s := &Shed{RetryAfter: time.Second, RetryAfterJitter: 2 * time.Second}
	classes := []shed.Class{{Name: "critical", Reserve: 100}, {Name: "default", Reserve: 200}, {Name: "sheddable"}}
	def := "default"
	if len(sj.Classes) > 0 {
		classes, def = classes[:0], sj.DefaultClass
		for i, c := range sj.Classes {
			classes = append(classes, shed.Class{Name: c.Name, Reserve: int(v.intIn("shed.classes["+strconv.Itoa(i)+"].reserve", c.Reserve, 0, 999))})
		}
	} else if sj.DefaultClass != "" {
		def = sj.DefaultClass
	}
	p, err := shed.NewPolicy(classes, def)
	if err != nil {
		v.failf("shed", "%v", strings.TrimPrefix(err.Error(), shed.ErrPolicy.Error()+": "))
	}
	s.Policy = p
	for _, c := range classes {
		s.Classes = append(s.Classes, c.Name)
	}
	if sj.ClassHeader != "" {
		if !isToken(sj.ClassHeader) {
			v.failf("shed.class_header", "%q is not a valid header name", sj.ClassHeader)
		}
		s.ClassHeader = strings.ToLower(sj.ClassHeader)
	}
	s.routes = v.routeClasses(sj.RouteClasses, classes)
	switch {
	case sj.Capacity.Set && sj.Adaptive != nil:
		v.failf("shed.capacity", "set capacity or adaptive, not both")
	case sj.Capacity.Set:
		s.Capacity = v.intIn("shed.capacity", sj.Capacity, 1, shed.MaxCapacity)
	case sj.Adaptive != nil:
		s.Adaptive = v.adaptive(sj.Adaptive)
	default:
		v.failf("shed.capacity", "required: a capacity (requests in flight) or an adaptive object")
	}
	s.Shadow = sj.Shadow
	s.RetryAfter = v.durationIn("shed.retry_after", sj.RetryAfter, s.RetryAfter, time.Second, time.Hour)
	s.RetryAfterJitter = v.durationIn("shed.retry_after_jitter", sj.RetryAfterJitter, s.RetryAfterJitter, 0, time.Hour)
	return s
}

func (v *validator) routeClasses(m map[string]string, classes []shed.Class) map[string]int {
	if len(m) > maxListItems {
		v.failf("shed.route_classes", "%d routes: at most %d are allowed", len(m), maxListItems)
		return nil
	}
	out := map[string]int{}
	for route, class := range m {
		found := false
		for i, c := range classes {
			if c.Name == class {
				out[route], found = i, true
			}
		}
		if !found {
			v.failf("shed.route_classes."+route, "unknown class %q", class)
		}
	}
	return out
}

// durationIn parses an optional duration in [lo, hi], returning def when s is empty.
func (v *validator) durationIn(path, s string, def, lo, hi time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		v.failf(path, "%v", err)
	case d < lo || d > hi:
		v.failf(path, "%s out of range: want %s to %s", s, lo, hi)
	default:
		return d
	}
	return def
}

func (v *validator) adaptive(aj *adaptiveJSON) *shed.Gradient {
	g := shed.DefaultGradient()
	set := func(o optInt, dst *int64) {
		if o.Set {
			*dst = o.Value
		}
	}
	seti := func(o optInt, dst *int) {
		if o.Set {
			*dst = int(max(min(o.Value, 1<<31), -1<<31))
		}
	}
	set(aj.MinLimit, &g.MinLimit)
	set(aj.MaxLimit, &g.MaxLimit)
	set(aj.InitialLimit, &g.InitialLimit)
	set(aj.ProbeLimit, &g.ProbeLimit)
	set(aj.ProbeSamples, &g.ProbeSamples)
	seti(aj.Percentile, &g.Percentile)
	seti(aj.Buffer, &g.Buffer)
	seti(aj.Smoothing, &g.Smoothing)
	seti(aj.Backoff, &g.Backoff)
	seti(aj.ProbeJitter, &g.ProbeJitter)
	g.Interval = v.durationIn("shed.adaptive.interval", aj.Interval, g.Interval, 0, 1<<62)
	g.Objective = v.durationIn("shed.adaptive.objective", aj.Objective, g.Objective, 0, 1<<62)
	g.ProbeInterval = v.durationIn("shed.adaptive.probe_interval", aj.ProbeInterval, g.ProbeInterval, 0, 1<<62)
	if err := g.Validate(); err != nil {
		// shed names the field: "shed: invalid gradient controller: probe_limit: want …"
		msg := strings.TrimPrefix(err.Error(), shed.ErrGradient.Error()+": ")
		field, rest, _ := strings.Cut(msg, ": ")
		v.failf("shed.adaptive."+field, "%s", rest)
		return nil
	}
	return &g
}
