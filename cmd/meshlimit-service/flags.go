package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// envFlags is the binary's flag set: typed flags, each refusing a value out of its range with an
// error that names it, and each read from its environment variable (MESHLIMIT_ and the flag's
// name in capitals, _ for -) when the command line does not set it.
type envFlags struct {
	fs      *flag.FlagSet
	getenv  func(string) string
	refused error // the first value a flag refused, in its own words (package flag's would bury them)
}

func newEnvFlags(name string, getenv func(string) string) *envFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // realMain reports errors in one line, and prints the usage for -h
	return &envFlags{fs: fs, getenv: getenv}
}

// envName is the environment variable of the flag name.
func envName(name string) string {
	return "MESHLIMIT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func (f *envFlags) string(p *string, name, def, usage string) { f.fs.StringVar(p, name, def, usage) }

func (f *envFlags) bool(p *bool, name string, def bool, usage string) {
	f.fs.BoolVar(p, name, def, usage)
}

// duration adds a duration flag that accepts values from min to max. Its usage names its type
// in back quotes, as package flag shows it.
func (f *envFlags) duration(p *time.Duration, name string, def, min, max time.Duration, usage string) {
	*p = def
	f.fs.Var(&durationValue{f: f, name: name, p: p, min: min, max: max}, name, usage)
}

// positiveInt adds an int flag that accepts values from 1 up.
func (f *envFlags) positiveInt(p *int, name string, def int, usage string) {
	*p = def
	f.fs.Var(&intValue{f: f, name: name, p: p}, name, usage)
}

// level adds a log level flag.
func (f *envFlags) level(p *slog.Level, name string, def slog.Level, usage string) {
	*p = def
	f.fs.Var(&levelValue{f: f, name: name, p: p}, name, usage)
}

// parse parses args, then sets every flag they did not set from its environment variable.
func (f *envFlags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		if f.refused != nil {
			return f.refused
		}
		return err
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if v := f.getenv(envName(fl.Name)); err == nil && !set[fl.Name] && v != "" && f.fs.Set(fl.Name, v) != nil {
			err = fmt.Errorf("%s: want %s, got %q", envName(fl.Name), wants(fl.Value), v)
		}
	})
	return err
}

// refuse records that flag name refused s (the first refusal is what parse reports) and returns
// the error.
func (f *envFlags) refuse(name string, v rangedValue, s string) error {
	err := fmt.Errorf("-%s: want %s, got %q", name, v.want(), s)
	if f.refused == nil {
		f.refused = err
	}
	return err
}

// rangedValue is a flag value that says what it accepts.
type rangedValue interface {
	flag.Value
	want() string
}

// wants says what a flag's value accepts.
func wants(v flag.Value) string {
	if r, ok := v.(rangedValue); ok {
		return r.want()
	}
	if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "true or false"
	}
	return "a string"
}

// durationValue is a duration flag that accepts values from min to max.
type durationValue struct {
	f        *envFlags
	name     string
	p        *time.Duration
	min, max time.Duration
}

func (v *durationValue) String() string {
	if v.p == nil {
		return "0s"
	}
	return v.p.String()
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < v.min || d > v.max {
		return v.f.refuse(v.name, v, s)
	}
	*v.p = d
	return nil
}

func (v *durationValue) want() string {
	switch {
	case v.max < math.MaxInt64:
		return fmt.Sprintf("a duration between %v and %v", v.min, v.max)
	case v.min > 0:
		return "a positive duration"
	}
	return "a duration"
}

// intValue is an int flag that accepts values from 1 up.
type intValue struct {
	f    *envFlags
	name string
	p    *int
}

func (v *intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return v.f.refuse(v.name, v, s)
	}
	*v.p = n
	return nil
}

func (v *intValue) want() string { return "a positive integer" }

// levelValue is a log level flag: debug, info, warn or error.
type levelValue struct {
	f    *envFlags
	name string
	p    *slog.Level
}

func (v *levelValue) String() string {
	if v.p == nil {
		return "" // the zero levelValue, which package flag compares a default with
	}
	return strings.ToLower(v.p.String())
}

func (v *levelValue) Set(s string) error {
	if err := v.p.UnmarshalText([]byte(s)); err != nil {
		return v.f.refuse(v.name, v, s)
	}
	return nil
}

func (v *levelValue) want() string { return "debug, info, warn or error" }
