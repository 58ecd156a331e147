package rules

import "time"

// Bounds of global.reset_poll.
const (
	minResetPoll = 100 * time.Millisecond
	maxResetPoll = time.Hour
)

// resetPoll compiles global.reset_poll: empty is the default (DefaultResetPoll), "off" or a
// zero duration turns the reset log off (0), anything else must be within 100ms to 1h.
func (v *validator) resetPoll(s string) time.Duration {
	if s == "" {
		return DefaultResetPoll
	}
	if s == "off" {
		return 0
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		v.failf("global.reset_poll", "%v (or \"off\")", err)
	case d == 0:
		return 0
	case d < minResetPoll || d > maxResetPoll:
		v.failf("global.reset_poll", "%s out of range: want 100ms to 1h, or \"0s\" or \"off\" to never read the reset log", s)
	default:
		return d
	}
	return DefaultResetPoll
}
