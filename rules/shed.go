package rules

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshlimit/meshlimit/internal/fnv"
	"github.com/meshlimit/meshlimit/internal/sha256"
	"github.com/meshlimit/meshlimit/internal/siphash"
	"github.com/meshlimit/meshlimit/shed"
)

// shedJSON is the top-level shed object, or one element of shedders: priority load shedding
// in front of the upstream (docs/shedding.md). It sets capacity or adaptive, not both.
type shedJSON struct {
	// Name names the shedder in metrics and shared data; required in shedders (1 to 64
	// characters of [A-Za-z0-9_-], unique), not allowed in shed.
	Name string `json:"name"`
	// Match selects the requests the shedder governs (the rules' match); only in shedders.
	// Default: every request.
	Match *matchJSON `json:"match"`
	// Classes, highest priority first, 1 to 8. Default critical (reserve 100), default
	// (reserve 200), sheddable (reserve 0).
	Classes []shedClassJSON `json:"classes"`
	// DefaultClass is the class of a request that names none or an unknown one. Default
	// "default" with the default classes, else required.
	DefaultClass string `json:"default_class"`
	// ClassFrom maps a key part's value (an identity: a JWT claim, a header a trusted hop
	// sets) to a class. Default: none.
	ClassFrom *classFromJSON `json:"class_from"`
	// ClassHeader names the request header whose value is the class name (exact). Default:
	// none.
	ClassHeader string `json:"class_header"`
	// RouteClasses maps Envoy route names to classes; a route listed here wins over
	// class_from and the header. Default: none.
	RouteClasses map[string]string `json:"route_classes"`
	// Capacity is a configured capacity: requests in flight, 1 to shed.MaxCapacity.
	Capacity optInt `json:"capacity"`
	// Adaptive computes the capacity from the upstream's latency.
	Adaptive *adaptiveJSON `json:"adaptive"`
	// Shadow makes the shedder decide and count but never shed. Default false.
	Shadow bool `json:"shadow"`
	// EnforcePercent is the share of key values, 0 to 100, the shedder enforces; it decides
	// the others in shadow. Below 100 it needs key. Default 100.
	EnforcePercent optInt `json:"enforce_percent"`
	// Key is the key enforce_percent hashes (the rules' key parts). Default: none.
	Key []keyPartJSON `json:"key"`
	// EnforceSecret keys the hash of enforce_percent (16 to 256 bytes), so that a client who
	// writes the key cannot compute which of its values are in shadow. Default: none (FNV-1a
	// of the shedder's name and the value, which anyone can compute).
	EnforceSecret string `json:"enforce_secret"`
	// EnforceSecretEnv names an environment variable of the VM holding EnforceSecret instead;
	// it wins when set and not empty.
	EnforceSecretEnv string `json:"enforce_secret_env"`
	// KeyShare is the share of the capacity, in thousandths (1 to 1000), that the requests of
	// one share_key value may hold at once; 1000 (the default) is no cap.
	KeyShare optInt `json:"key_share"`
	// ShareKey is the key (the rules' key parts) that key_share counts by. Default
	// ["client_ip"]; only with key_share.
	ShareKey []keyPartJSON `json:"share_key"`
	// RetryAfter is the Retry-After of a shed request before jitter, 1s to 1h. Default "1s".
	RetryAfter string `json:"retry_after"`
	// RetryAfterJitter is the most Retry-After is randomly lengthened by, 0 to 1h. Default
	// "2s".
	RetryAfterJitter string `json:"retry_after_jitter"`
}

// classFromJSON is shed.class_from: one key part and the classes of its values.
type classFromJSON struct {
	// Key is the key part whose value names the class (e.g. {"property": [...]}).
	Key *keyPartJSON `json:"key"`
	// Classes maps values of the key part to class names, 1 to maxListItems entries. A
	// value not listed gets the class header's class or the default class.
	Classes map[string]string `json:"classes"`
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
	// ProbeTimeout ends a probe on time (100ms to 1h); ProbeMinSamples is the fewest samples
	// a probe ended on time needs to set the ideal latency.
	ProbeTimeout    string `json:"probe_timeout"`
	ProbeMinSamples optInt `json:"probe_min_samples"`
}

// Shed is one compiled shedder.
type Shed struct {
	// Name is the shedder's name, "" for the shed object.
	Name string
	// MetricPrefix starts the shedder's metric names: "meshlimit.shed." for the shed object,
	// "meshlimit.shed.<name>." for a shedder of shedders.
	MetricPrefix string
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
	// EnforcePercent is the share of key values the shedder enforces (see Enforced).
	EnforcePercent int
	// RetryAfter and RetryAfterJitter make the Retry-After of a shed request.
	RetryAfter, RetryAfterJitter time.Duration

	match       match
	routes      map[string]int
	classFrom   keyPart
	fromSet     bool
	fromMap     map[string]int // appendPart of a value -> class
	key         []keyPart
	shareKey    []keyPart // the key key_share counts by (nil: no key share)
	enforcer    *Rule     // carries the percentage enforcedHash compares with
	enforceSeed uint64    // FNV-1a of "shed/<name>\x00", as Rule.EnforcedFor starts its hash
	enforceKey  [2]uint64 // the SipHash key, from enforce_secret
	keyed       bool      // enforce_secret is set: the hash is SipHash-2-4 under enforceKey
}

// Matches reports whether the shedder governs req (its match; no match matches all).
func (s *Shed) Matches(req Request) bool { return s.match.matches(req) }

// Class returns the class index of a request: its route's class, else the class class_from
// maps its key part's value to, else its class header's, else the default class. buf is
// scratch space (returned for reuse), so that Class does not allocate.
func (s *Shed) Class(req Request, buf []byte) (int, []byte) {
	if len(s.routes) > 0 {
		if c, ok := s.routes[req.RouteName()]; ok {
			return c, buf
		}
	}
	if s.fromSet {
		var st KeyStatus
		buf, st = s.classFrom.appendValue(buf[:0], req)
		if st == KeyFound {
			if c, ok := s.fromMap[string(buf)]; ok {
				return c, buf
			}
		}
	}
	if s.ClassHeader != "" {
		if v, ok := req.HeaderValue(s.ClassHeader, 0); ok {
			return s.Policy.Class(v), buf
		}
	}
	return s.Policy.Class(""), buf
}

// Enforced reports whether the shedder enforces req (see enforce_percent): always at 100,
// never at 0, else for a fixed share of its key's values (a missing or conflicting part
// makes the value ""), the same on every proxy. With enforce_secret the share is picked by
// SipHash-2-4 under the secret: a client that writes the key cannot tell which of its values are
// in shadow (without it, anyone can compute them). buf is scratch space, returned for reuse.
func (s *Shed) Enforced(req Request, buf []byte) (bool, []byte) {
	switch s.EnforcePercent {
	case 100:
		return true, buf
	case 0:
		return false, buf
	}
	buf = buf[:0]
	for i := range s.key {
		if i > 0 {
			buf = append(buf, '|')
		}
		n := len(buf)
		var st KeyStatus
		if buf, st = s.key[i].appendValue(buf, req); st != KeyFound {
			buf = buf[:n]
		}
	}
	if s.keyed {
		return s.enforcer.enforcedHash(siphash.Sum64(s.enforceKey[0], s.enforceKey[1], s.enforceSeed, buf)), buf
	}
	return s.enforcer.enforcedHash(fnv.AddBytes(s.enforceSeed, buf)), buf
}

// shedders compiles the shed object or the shedders list.
func (v *validator) shedders(doc *configJSON) []*Shed {
	if doc.Shed != nil && len(doc.Shedders) > 0 {
		v.failf("shedders", "set shed or shedders, not both")
		return nil
	}
	if doc.Shed != nil {
		if doc.Shed.Name != "" {
			v.failf("shed.name", "only shedders take a name")
		}
		if doc.Shed.Match != nil {
			v.failf("shed.match", "only shedders take a match")
		}
		s := v.shed("shed", doc.Shed)
		s.MetricPrefix = "meshlimit.shed."
		return []*Shed{s}
	}
	if len(doc.Shedders) > maxShedders {
		v.failf("shedders", "%d shedders: at most %d are allowed", len(doc.Shedders), maxShedders)
		return nil
	}
	var out []*Shed
	seen := map[string]bool{}
	for i := range doc.Shedders {
		sj := &doc.Shedders[i]
		path := "shedders[" + strconv.Itoa(i) + "]"
		switch {
		case !isShedderName(sj.Name):
			v.failf(path+".name", "%q: want 1 to 64 characters of A-Z, a-z, 0-9, _ and -", sj.Name)
		case seen[sj.Name]:
			v.failf(path+".name", "%q is already the name of another shedder", sj.Name)
		}
		seen[sj.Name] = true
		s := v.shed(path, sj)
		s.Name, s.MetricPrefix = sj.Name, "meshlimit.shed."+sj.Name+"."
		if sj.Match != nil {
			s.match = v.match(path+".match", sj.Match)
		}
		out = append(out, s)
	}
	return out
}

func isShedderName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (v *validator) shed(path string, sj *shedJSON) *Shed {
	s := &Shed{RetryAfter: time.Second, RetryAfterJitter: 2 * time.Second}
	classes := []shed.Class{{Name: "critical", Reserve: 100}, {Name: "default", Reserve: 200}, {Name: "sheddable"}}
	def := "default"
	if len(sj.Classes) > 0 {
		classes, def = classes[:0], sj.DefaultClass
		for i, c := range sj.Classes {
			classes = append(classes, shed.Class{Name: c.Name, Reserve: int(v.intIn(path+".classes["+strconv.Itoa(i)+"].reserve", c.Reserve, 0, 999))})
		}
	} else if sj.DefaultClass != "" {
		def = sj.DefaultClass
	}
	p, err := shed.NewPolicy(classes, def)
	if err != nil {
		v.failf(path, "%v", strings.TrimPrefix(err.Error(), shed.ErrPolicy.Error()+": "))
	}
	s.Policy = p
	for _, c := range classes {
		s.Classes = append(s.Classes, c.Name)
	}
	if sj.ClassHeader != "" {
		if !isToken(sj.ClassHeader) {
			v.failf(path+".class_header", "%q is not a valid header name", sj.ClassHeader)
		}
		s.ClassHeader = strings.ToLower(sj.ClassHeader)
	}
	s.routes = v.routeClasses(path+".route_classes", sj.RouteClasses, classes)
	if sj.ClassFrom != nil {
		v.classFrom(path+".class_from", sj.ClassFrom, s, classes)
	}
	v.shedCapacity(path, sj, s)
	s.Shadow = sj.Shadow
	v.shedEnforce(path, sj, s)
	v.shedKeyShare(path, sj, s)
	s.RetryAfter = v.durationIn(path+".retry_after", sj.RetryAfter, s.RetryAfter, time.Second, time.Hour)
	s.RetryAfterJitter = v.durationIn(path+".retry_after_jitter", sj.RetryAfterJitter, s.RetryAfterJitter, 0, time.Hour)
	return s
}

func (v *validator) shedCapacity(path string, sj *shedJSON, s *Shed) {
	switch {
	case sj.Capacity.Set && sj.Adaptive != nil:
		v.failf(path+".capacity", "set capacity or adaptive, not both")
	case sj.Capacity.Set:
		s.Capacity = v.intIn(path+".capacity", sj.Capacity, 1, shed.MaxCapacity)
	case sj.Adaptive != nil:
		s.Adaptive = v.adaptive(path+".adaptive", sj.Adaptive)
	default:
		v.failf(path+".capacity", "required: a capacity (requests in flight) or an adaptive object")
	}
}

// shedKeyShare compiles key_share and share_key into s.Policy.
func (v *validator) shedKeyShare(path string, sj *shedJSON, s *Shed) {
	if !sj.KeyShare.Set {
		if len(sj.ShareKey) > 0 {
			v.failf(path+".share_key", "only with key_share: the share one key value may hold")
		}
		if sj.Adaptive != nil { // the controller's samples are held to each client's share
			if kp, ok := v.keyPart(path+".share_key[0]", &keyPartJSON{ClientIP: &clientIPJSON{}}); ok {
				s.shareKey = append(s.shareKey, kp)
			}
		}
		return
	}
	share := int(v.intIn(path+".key_share", sj.KeyShare, 1, 1000))
	if p, err := s.Policy.WithKeyShare(max(share, 1)); err == nil {
		s.Policy = p
	}
	parts := sj.ShareKey
	if len(parts) == 0 {
		parts = []keyPartJSON{{ClientIP: &clientIPJSON{}}}
	}
	if len(parts) > maxKeyParts {
		v.failf(path+".share_key", "%d parts: at most %d are allowed", len(parts), maxKeyParts)
		return
	}
	for i := range parts {
		if kp, ok := v.keyPart(path+".share_key["+strconv.Itoa(i)+"]", &parts[i]); ok {
			s.shareKey = append(s.shareKey, kp)
		}
	}
}

// KeyShared reports whether the shedder holds each share_key value to its key_share.
func (s *Shed) KeyShared() bool { return len(s.shareKey) > 0 && s.Policy.KeyShare() < 1000 }

// KeyShareSlots is the number of records the key share keeps its counts in: four times the
// largest capacity (each key in flight holds at least one slot, so at most a quarter of them are
// taken and a new key rarely finds its candidates held), between 64 and 1<<20.
func (s *Shed) KeyShareSlots() int {
	c := s.Capacity
	if s.Adaptive != nil {
		c = s.Adaptive.MaxLimit
	}
	return int(min(max(4*c, 64), 1<<20))
}

// ShareKey appends to buf[:0] the share_key value of req (with an adaptive capacity and no
// key_share, the client's address: the key the controller's samples are shared by) (a missing or conflicting part counts
// as the empty value) and returns it; it does not allocate when buf has room.
func (s *Shed) ShareKey(req Request, buf []byte) []byte {
	buf = buf[:0]
	for i := range s.shareKey {
		if i > 0 {
			buf = append(buf, '|')
		}
		n := len(buf)
		var st KeyStatus
		if buf, st = s.shareKey[i].appendValue(buf, req); st != KeyFound {
			buf = buf[:n]
		}
	}
	return buf
}

// shedEnforce compiles enforce_percent and key.
func (v *validator) shedEnforce(path string, sj *shedJSON, s *Shed) {
	s.EnforcePercent = 100
	if sj.EnforcePercent.Set {
		s.EnforcePercent = int(v.intIn(path+".enforce_percent", sj.EnforcePercent, 0, 100))
	}
	if len(sj.Key) > maxKeyParts {
		v.failf(path+".key", "%d parts: at most %d are allowed", len(sj.Key), maxKeyParts)
		return
	}
	for i := range sj.Key {
		if kp, ok := v.keyPart(path+".key["+strconv.Itoa(i)+"]", &sj.Key[i]); ok {
			s.key = append(s.key, kp)
		}
	}
	s.enforcer = &Rule{Name: "shed/" + sj.Name, EnforcePercent: s.EnforcePercent}
	s.enforceSeed = fnv.AddString(fnv.Offset64, s.enforcer.Name+"\x00")
	if s.EnforcePercent > 0 && s.EnforcePercent < 100 && len(sj.Key) == 0 {
		v.failf(path+".key", "required by enforce_percent %d: the key decides which requests are enforced", s.EnforcePercent)
	}
	v.enforceSecret(path, sj, s)
}

// The bounds of shed.enforce_secret, in bytes (as response.partition_key_secret's).
const minEnforceSecret, maxEnforceSecret = 16, 256

// enforceSecret compiles enforce_secret and enforce_secret_env into the SipHash key of Enforced.
func (v *validator) enforceSecret(path string, sj *shedJSON, s *Shed) {
	secret, field := sj.EnforceSecret, path+".enforce_secret"
	if sj.EnforceSecretEnv != "" {
		if e := os.Getenv(sj.EnforceSecretEnv); e != "" {
			secret, field = e, path+".enforce_secret_env"
		}
	}
	if secret == "" {
		return
	}
	if n := len(secret); n < minEnforceSecret || n > maxEnforceSecret {
		v.failf(field, "%d bytes: want %d to %d", n, minEnforceSecret, maxEnforceSecret)
		return
	}
	sum := sha256.Sum256([]byte("meshlimit-shed-enforce-v1\x00" + secret))
	s.enforceKey = [2]uint64{binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])}
	s.keyed = true
}

// classFrom compiles class_from into s.
func (v *validator) classFrom(path string, cj *classFromJSON, s *Shed, classes []shed.Class) {
	if cj.Key == nil {
		v.failf(path+".key", "required: the key part whose value names the class")
		return
	}
	kp, ok := v.keyPart(path+".key", cj.Key)
	if !ok {
		return
	}
	switch n := len(cj.Classes); {
	case n == 0:
		v.failf(path+".classes", "required: at least one value and its class")
		return
	case n > maxListItems:
		v.failf(path+".classes", "%d values: at most %d are allowed", n, maxListItems)
		return
	}
	s.classFrom, s.fromSet, s.fromMap = kp, true, map[string]int{}
	for val, class := range cj.Classes {
		c := classIndex(classes, class)
		switch {
		case val == "":
			v.failf(path+".classes", "an empty value: a missing part never names a class")
		case c < 0:
			v.failf(path+".classes["+quoteInput(val)+"]", "unknown class %q", class)
		default:
			s.fromMap[string(appendPart(nil, val))] = c
		}
	}
}

func classIndex(classes []shed.Class, name string) int {
	for i, c := range classes {
		if c.Name == name {
			return i
		}
	}
	return -1
}

func (v *validator) routeClasses(path string, m map[string]string, classes []shed.Class) map[string]int {
	if len(m) > maxListItems {
		v.failf(path, "%d routes: at most %d are allowed", len(m), maxListItems)
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
			v.failf(path+"."+route, "unknown class %q", class)
		}
	}
	return out
}

func (v *validator) adaptive(path string, aj *adaptiveJSON) *shed.Gradient {
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
	set(aj.ProbeMinSamples, &g.ProbeMinSamples)
	seti(aj.Percentile, &g.Percentile)
	seti(aj.Buffer, &g.Buffer)
	seti(aj.Smoothing, &g.Smoothing)
	seti(aj.Backoff, &g.Backoff)
	seti(aj.ProbeJitter, &g.ProbeJitter)
	g.Interval = v.durationIn(path+".interval", aj.Interval, g.Interval, 0, 1<<62)
	g.Objective = v.durationIn(path+".objective", aj.Objective, g.Objective, 0, 1<<62)
	g.ProbeInterval = v.durationIn(path+".probe_interval", aj.ProbeInterval, g.ProbeInterval, 0, 1<<62)
	g.ProbeTimeout = v.durationIn(path+".probe_timeout", aj.ProbeTimeout, g.ProbeTimeout, 0, 1<<62)
	if err := g.Validate(); err != nil {
		// shed names the field: "shed: invalid gradient controller: probe_limit: want …"
		msg := strings.TrimPrefix(err.Error(), shed.ErrGradient.Error()+": ")
		field, rest, _ := strings.Cut(msg, ": ")
		v.failf(path+"."+field, "%s", rest)
		return nil
	}
	return &g
}
