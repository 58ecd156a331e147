package rules

import (
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// maxEcho is the most bytes of a configuration's own input an error message quotes: a longer
// value is quoted up to there (at a character boundary), followed by its length, so that an 8 MB
// name gives an error of a line, not of 8 MB.
const maxEcho = 64

// quoteInput returns s quoted as %q quotes it when it has at most maxEcho bytes; a longer s as
// its quoted prefix of at most maxEcho bytes, then "..." and its length in bytes.
func quoteInput(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:echoCut(s)]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// echoText returns s, unquoted (a number as written), when it has at most maxEcho bytes; a longer
// s as its prefix, then "..." and its length in bytes.
func echoText(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return s[:echoCut(s)] + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// echoCut is where a long s is cut: at most maxEcho bytes, at the start of a character.
func echoCut(s string) int {
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return cut
}

// echo is a string argument of an error message: %q quotes it as quoteInput does (bounded), any
// other verb writes it whole (the lists of known names a message spells out are written with %s).
type echo string

// Format implements fmt.Formatter.
func (e echo) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		_, _ = io.WriteString(f, quoteInput(string(e)))
		return
	}
	_, _ = io.WriteString(f, string(e))
}

// bounded makes each string among args an echo, in place (args is a variadic call's own slice),
// so that what a message quotes of the configuration is bounded.
func bounded(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = echo(s)
		}
	}
	return args
}

// errorf is fmt.Errorf with the string arguments bounded (see bounded): the decoder's and the
// compiler's errors that quote their input are built with it.
func errorf(format string, args ...any) error {
	return fmt.Errorf(format, bounded(args)...)
}
