package rlsconfig

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
)

// Watcher keeps the Config of a directory current: it polls the directory's configuration
// files (names, modification times and sizes, then a hash of their contents when those
// change) and reloads them when they changed. A reload is whole or not at all: when a file is
// bad, the last good Config stays in force and OnReload is told why, at every change, until
// the files load again.
type Watcher struct {
	dir      string
	interval time.Duration
	current  atomic.Pointer[Config]
	stamp    string   // names, mtimes and sizes of the files last read
	sum      [32]byte // hash of the files last read
	// OnReload, when set before Run, is called after every reload attempt (err nil: the new
	// Config is in force; otherwise it was refused). Run calls it from its own goroutine.
	OnReload func(c *Config, err error)
}

// DefaultInterval is how often a Watcher polls when NewWatcher is given 0.
const DefaultInterval = 2 * time.Second

// NewWatcher loads dir and returns a Watcher for it; it fails when dir cannot be read or its
// files do not load (the service should not start on a bad configuration).
func NewWatcher(dir string, interval time.Duration) (*Watcher, error) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	w := &Watcher{dir: dir, interval: interval}
	stamp, err := w.fingerprint()
	if err != nil {
		return nil, err
	}
	files, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	c, err := Load(files)
	if err != nil {
		return nil, err
	}
	w.current.Store(c)
	w.stamp, w.sum = stamp, hashFiles(files)
	return w, nil
}

// Config returns the Config in force. It never returns nil.
func (w *Watcher) Config() *Config { return w.current.Load() }

// Run polls until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Poll()
		}
	}
}

// Poll checks the directory once and reloads it if its files changed. It reports whether it
// attempted a reload. It must not be called concurrently with itself or Run.
func (w *Watcher) Poll() bool {
	stamp, err := w.fingerprint()
	if err != nil {
		w.report(nil, err)
		return true
	}
	if stamp == w.stamp {
		return false
	}
	w.stamp = stamp
	files, err := ReadDir(w.dir)
	if err != nil {
		w.stamp = "" // try again at the next poll
		w.report(nil, err)
		return true
	}
	sum := hashFiles(files)
	if sum == w.sum {
		return false // touched, or swapped for the same contents
	}
	w.sum = sum
	c, err := Load(files)
	if err == nil {
		w.current.Store(c)
	}
	w.report(c, err)
	return true
}

func (w *Watcher) report(c *Config, err error) {
	if w.OnReload != nil {
		w.OnReload(c, err)
	}
}

// fingerprint describes the directory's configuration files by name, mtime and size.
func (w *Watcher) fingerprint() (string, error) {
	ents, err := os.ReadDir(w.dir)
	if err != nil {
		return "", err
	}
	var b []byte
	for _, e := range ents {
		if !isConfigName(e.Name()) {
			continue
		}
		st, err := os.Stat(filepath.Join(w.dir, e.Name())) // follows ConfigMap symlinks
		if err != nil {
			continue
		}
		b = append(b, e.Name()...)
		b = append(b, 0)
		b = strconv.AppendInt(b, st.ModTime().UnixNano(), 10)
		b = append(b, 0)
		b = strconv.AppendInt(b, st.Size(), 10)
		b = append(b, '\n')
	}
	return string(b), nil
}

// hashFiles hashes the files' names and contents, in name order.
func hashFiles(files []File) [32]byte {
	files = append([]File(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(len(f.Data))))
		h.Write([]byte{0})
		h.Write(f.Data)
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}
