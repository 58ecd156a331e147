//go:build race

package messages

const raceEnabled = true
