package rules

import (
	"math"
	"strconv"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
	"github.com/meshlimit/meshlimit/internal/fnv"
)

// messagesJSON is rules[].messages: the rule's limits count the messages of the stream instead of
// its requests (docs/configuration.md, "Limits on the messages of streams").
type messagesJSON struct {
	// Direction is "request" (client to server), "response" (server to client) or "both" (each
	// direction in its own bucket of the same limits). Default "both".
	Direction string `json:"direction"`
	// Protocols are "grpc" (application/grpc and application/grpc+*) and "websocket" (after a 101).
	// Default both.
	Protocols []string `json:"protocols"`
	// OnLimit is "shape" (hold the stream until the next message is allowed) or "end" (end it).
	// Default "shape".
	OnLimit string `json:"on_limit"`
	// MaxHold bounds how long a shaped direction is held, 1ms to 4m; past it the stream is
	// ended. Default "30s".
	MaxHold string `json:"max_hold"`
	// PerStream gives every stream its own bucket instead of sharing the key's. Default false.
	PerStream bool `json:"per_stream"`
}

// MessageAction is what a message over the limit does.
type MessageAction uint8

const (
	// MessagesShape holds the direction (Envoy's flow control pushes back) until the message is
	// allowed, at most MaxHold.
	MessagesShape MessageAction = iota
	// MessagesEnd ends the stream: gRPC RESOURCE_EXHAUSTED before the response started, else a reset;
	// WebSocket a close frame (1008), toward the client or the server, then a reset.
	MessagesEnd
)

// Messages is a compiled rules[].messages. A rule with one decides no request: its limits are taken
// by the messages of the streams it matches, one unit (the rule's cost) per message.
type Messages struct {
	Request, Response bool // the directions counted
	GRPC, WebSocket   bool // the protocols counted
	OnLimit           MessageAction
	MaxHold           time.Duration
	PerStream         bool
}

// Summary is the message limit in the configuration's one-line summary: "request/shape",
// "both/end".
func (m *Messages) Summary() string {
	dir := "both"
	switch {
	case !m.Response:
		dir = "request"
	case !m.Request:
		dir = "response"
	}
	if m.OnLimit == MessagesEnd {
		return dir + "/end"
	}
	return dir + "/shape"
}

// Messages returns the rule's message limit, or nil when the rule counts requests.
func (r *Rule) Messages() *Messages { return r.messages }

const (
	defaultMaxHold = 30 * time.Second
	// maxMaxHold stays under Envoy's default stream_idle_timeout (5m), which would end a held stream.
	maxMaxHold = 4 * time.Minute
)

// messages compiles rules[].messages into r, after the rest of the rule (its fingerprint
// included, which the message limit then changes: a rule's state counts requests or messages).
func (v *validator) messages(path string, rj *ruleJSON, r *Rule) {
	mj := rj.Messages
	if mj == nil {
		return
	}
	path += ".messages"
	m := &Messages{OnLimit: MessagesShape, PerStream: mj.PerStream}
	switch mj.Direction {
	case "", "both":
		m.Request, m.Response = true, true
	case "request":
		m.Request = true
	case "response":
		m.Response = true
	default:
		v.failf(path+".direction", "unknown value %q (want request, response or both)", mj.Direction)
	}
	v.messageProtocols(path+".protocols", mj.Protocols, m)
	switch mj.OnLimit {
	case "", "shape":
	case "end":
		m.OnLimit = MessagesEnd
	default:
		v.failf(path+".on_limit", "unknown value %q (want shape or end)", mj.OnLimit)
	}
	m.MaxHold = v.durationIn(path+".max_hold", mj.MaxHold, defaultMaxHold, time.Millisecond, maxMaxHold)
	v.checkMessageRule(path, rj, r)
	r.messages = m
	b := []byte{'m', byte(m.OnLimit), boolByte(m.Request), boolByte(m.Response), boolByte(m.PerStream)}
	r.fingerprint = fnv.AddBytes(r.fingerprint, b)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (v *validator) messageProtocols(path string, ps []string, m *Messages) {
	if len(ps) == 0 {
		m.GRPC, m.WebSocket = true, true
		return
	}
	for i, p := range ps {
		switch p {
		case "grpc":
			m.GRPC = true
		case "websocket":
			m.WebSocket = true
		default:
			v.failf(path+"["+strconv.Itoa(i)+"]", "unknown protocol %q (want grpc or websocket)", p)
		}
	}
}

// checkMessageRule refuses what a message limit cannot be combined with: the global service (one
// round trip per message, and a held body cannot wait for an answer), a response-conditioned
// count, a cost read from a header or a body, concurrency, and the leaky bucket (which delays
// requests; a stream's messages are shaped by every algorithm).
func (v *validator) checkMessageRule(path string, rj *ruleJSON, r *Rule) {
	if rj.Scope != "" && rj.Scope != "local" {
		v.failf(path, "a message limit counts in this proxy only: want scope local (global message limits are not supported)")
	}
	if rj.CountOn != nil {
		v.failf(path, "a message limit cannot be combined with count_on")
	}
	if rj.Cost != nil && rj.Cost.object != nil {
		v.failf(path, "a message limit charges a constant cost per message: cost cannot read a header or a body")
	}
	for i, lj := range rj.Limits {
		if lj.Concurrency.Set {
			v.failf(path, "a message limit needs rate limits: limits[%d] is a concurrency limit", i)
		}
	}
	for _, set := range r.sets {
		for _, s := range set.Limits {
			if s.Limit.Kind == algorithms.LeakyBucket {
				v.failf(path, "limit %s: a message limit shapes with on_limit: use token_bucket or a window, not leaky_bucket", s.Name)
				return
			}
		}
	}
}

// AdmitsWithin returns an upper bound on the cost that limits, all of which must admit every
// message, can admit within d from any state: a bucket at most its burst (Capacity) and what it
// refills in d (Quota × d / Window, rounded up); a window at most its quota in each window d
// touches (Quota × (⌈d / Window⌉ + 1)). A calendar window claims no bound (math.MaxInt64). A
// shaped direction owing more than this can never be released within max_hold.
func AdmitsWithin(limits []LimitSpec, d time.Duration) int64 {
	most := int64(math.MaxInt64)
	for i := range limits {
		most = min(most, admitsWithin(limits[i].Limit, d))
	}
	return most
}

func admitsWithin(l algorithms.Limit, d time.Duration) int64 {
	if l.Calendar.Unit != 0 || l.Window <= 0 || l.Quota <= 0 {
		return math.MaxInt64
	}
	per := float64(l.Quota)
	var f float64
	if l.Kind.TakesBurst() {
		f = float64(l.Capacity()) + math.Ceil(per*float64(d)/float64(l.Window))
	} else {
		f = per * (math.Ceil(float64(d)/float64(l.Window)) + 1)
	}
	if f >= math.MaxInt64/2 {
		return math.MaxInt64
	}
	return int64(f)
}
