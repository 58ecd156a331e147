package envoyhost

import (
	"crypto/rand"
	"encoding/binary"
	"sort"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// WASI errno values Envoy returns (§1.1).
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoInval   = 28
	errnoNoent   = 44
	errnoNosys   = 52
	errnoNotdir  = 20
	errnoNotsup  = 58
)

// randomGetMax is PROXY_WASM_HOST_WASI_RANDOM_GET_MAX_SIZE_BYTES (§1.1).
const randomGetMax = 64 << 10

// wasiFuncs returns Envoy's WASI functions (§1.1, cpp-host src/exports.cc). Every
// function is also registered under wasi_unstable.
func wasiFuncs() []hostFunc {
	ret := func(errno uint64) func(*VM, []uint64) {
		return func(_ *VM, s []uint64) { s[0] = errno }
	}
	// stdio returns f's result for fd 1 and 2 and EBADF otherwise.
	stdio := func(f func(v *VM, s []uint64) uint64) func(*VM, []uint64) {
		return func(v *VM, s []uint64) {
			if fd := u32(s[0]); fd != 1 && fd != 2 {
				s[0] = errnoBadf
				return
			}
			s[0] = f(v, s)
		}
	}
	zero := func(*VM, []uint64) uint64 { return errnoSuccess }
	// notsup zeroes the out-parameters at the given argument positions, then
	// returns ENOTSUP.
	notsup := func(outs ...int) func(*VM, []uint64) {
		return func(v *VM, s []uint64) {
			for _, i := range outs {
				v.mem.WriteUint32Le(u32(s[i]), 0)
			}
			s[0] = errnoNotsup
		}
	}
	w := func(name string, gens genSet, params, results []api.ValueType, impl func(*VM, []uint64)) hostFunc {
		return hostFunc{module: modWASI, name: name, params: params, results: results, impl: impl, gens: gens}
	}
	p := func(ts ...api.ValueType) []api.ValueType { return ts }
	return []hostFunc{
		// The 18 functions of the #427 generation (pre-1.33 lacks three of them).
		w("args_get", allGens, sig(2), r32, ret(errnoSuccess)),
		w("args_sizes_get", allGens, sig(2), r32, wasiArgsSizesGet),
		w("clock_time_get", allGens, p(i32, i64, i32), r32, wasiClockTimeGet),
		w("environ_get", allGens, sig(2), r32, wasiEnvironGet),
		w("environ_sizes_get", allGens, sig(2), r32, wasiEnvironSizesGet),
		w("fd_close", allGens, sig(1), r32, func(v *VM, s []uint64) {
			v.p.log(v.index, LogTrace, "wasi_unstable fd_close")
			s[0] = errnoSuccess
		}),
		w("fd_fdstat_get", allGens, sig(2), r32, wasiFdFdstatGet),
		w("fd_fdstat_set_flags", since133, sig(2), r32, ret(errnoNosys)),
		w("fd_prestat_dir_name", allGens, sig(3), r32, ret(errnoNosys)),
		w("fd_prestat_get", allGens, sig(2), r32, ret(errnoBadf)),
		w("fd_read", allGens, sig(4), r32, ret(errnoNosys)),
		w("fd_seek", allGens, p(i32, i64, i32, i32), r32, func(v *VM, s []uint64) {
			v.p.log(v.index, LogTrace, "wasi_unstable fd_seek")
			s[0] = errnoSuccess // newoffset is not written
		}),
		w("fd_write", allGens, sig(4), r32, wasiFdWrite),
		w("path_open", allGens, p(i32, i32, i32, i32, i32, i64, i64, i32, i32), r32, ret(errnoNoent)),
		w("poll_oneoff", since133, sig(4), r32, wasiPollOneoff),
		w("proc_exit", allGens, sig(1), rNone, func(v *VM, _ []uint64) {
			// Envoy logs and returns normally; Go then executes unreachable (§7).
			v.p.log(v.index, LogTrace, "wasi_unstable proc_exit")
		}),
		w("random_get", allGens, sig(2), r32, wasiRandomGet),
		w("sched_yield", since133, nil, r32, ret(errnoSuccess)),

		// Added by #533.
		w("clock_res_get", in533, sig(2), r32, func(v *VM, s []uint64) {
			if id := u32(s[0]); id != 0 && id != 1 {
				s[0] = errnoNotsup
				return
			}
			v.mem.WriteUint64Le(u32(s[1]), 1)
			s[0] = errnoSuccess
		}),
		w("fd_advise", in533, p(i32, i64, i64, i32), r32, ret(errnoSuccess)),
		w("fd_allocate", in533, p(i32, i64, i64), r32, stdio(zero)),
		w("fd_datasync", in533, sig(1), r32, stdio(zero)),
		w("fd_fdstat_set_rights", in533, p(i32, i64, i64), r32, stdio(zero)),
		w("fd_filestat_get", in533, sig(2), r32, ret(errnoBadf)),
		w("fd_filestat_set_size", in533, p(i32, i64), r32, stdio(zero)),
		w("fd_filestat_set_times", in533, p(i32, i64, i64, i32), r32, stdio(zero)),
		w("fd_pread", in533, p(i32, i32, i32, i64, i32), r32, ret(errnoNosys)),
		w("fd_pwrite", in533, p(i32, i32, i32, i64, i32), r32, func(v *VM, s []uint64) {
			s[3] = s[4] // fd_write's nwritten position
			wasiFdWrite(v, s)
		}),
		w("fd_readdir", in533, p(i32, i32, i32, i64, i32), r32, func(v *VM, s []uint64) {
			v.mem.WriteUint32Le(u32(s[4]), 0)
			s[0] = errnoNotdir
		}),
		w("fd_renumber", in533, sig(2), r32, func(v *VM, s []uint64) {
			if u32(s[0]) > 2 || u32(s[1]) > 2 {
				s[0] = errnoBadf
				return
			}
			s[0] = errnoNotsup
		}),
		w("fd_sync", in533, sig(1), r32, stdio(zero)),
		w("fd_tell", in533, sig(2), r32, stdio(func(v *VM, s []uint64) uint64 {
			v.mem.WriteUint64Le(u32(s[1]), 0)
			return errnoSuccess
		})),
		w("path_create_directory", in533, sig(3), r32, notsup()),
		w("path_filestat_get", in533, sig(5), r32, notsup()),
		w("path_filestat_set_times", in533, p(i32, i32, i32, i32, i64, i64, i32), r32, notsup()),
		w("path_link", in533, sig(7), r32, notsup()),
		w("path_readlink", in533, sig(6), r32, notsup(5)),
		w("path_remove_directory", in533, sig(3), r32, notsup()),
		w("path_rename", in533, sig(6), r32, notsup()),
		w("path_symlink", in533, sig(5), r32, notsup()),
		w("path_unlink_file", in533, sig(3), r32, notsup()),
		w("sock_accept", in533, sig(3), r32, notsup(2)),
		w("sock_recv", in533, sig(6), r32, notsup(4, 5)),
		w("sock_send", in533, sig(5), r32, notsup(4)),
		w("sock_shutdown", in533, sig(2), r32, notsup()),
	}
}

// wasiArgsSizesGet reports no arguments.
func wasiArgsSizesGet(v *VM, s []uint64) {
	if !v.mem.WriteUint32Le(u32(s[0]), 0) || !v.mem.WriteUint32Le(u32(s[1]), 0) {
		s[0] = errnoInval
		return
	}
	s[0] = errnoSuccess
}

// wasiClockTimeGet reads the injectable clock: id 0 realtime, id 1 monotonic; other
// ids are ENOTSUP.
func wasiClockTimeGet(v *VM, s []uint64) {
	var ns int64
	switch u32(s[0]) {
	case 0:
		ns = v.p.clock.Now().UnixNano()
	case 1:
		ns = int64(v.p.clock.monotonic() + v.monoSkew)
	default:
		s[0] = errnoNotsup
		return
	}
	if !v.mem.WriteUint64Le(u32(s[2]), uint64(ns)) {
		s[0] = errnoInval
		return
	}
	s[0] = errnoSuccess
}

// wasiEnvironSizesGet and wasiEnvironGet expose Config.Env as "KEY=VALUE" strings.
func wasiEnvironSizesGet(v *VM, s []uint64) {
	size := 0
	for _, e := range v.p.environ {
		size += len(e) + 1
	}
	if !v.mem.WriteUint32Le(u32(s[0]), uint32(len(v.p.environ))) || !v.mem.WriteUint32Le(u32(s[1]), uint32(size)) {
		s[0] = errnoInval
		return
	}
	s[0] = errnoSuccess
}

func wasiEnvironGet(v *VM, s []uint64) {
	ptrs, buf := u32(s[0]), u32(s[1])
	for i, e := range v.p.environ {
		if !v.mem.WriteUint32Le(ptrs+uint32(4*i), buf) || !v.mem.WriteString(buf, e) || !v.mem.WriteByte(buf+uint32(len(e)), 0) {
			s[0] = errnoInval
			return
		}
		buf += uint32(len(e)) + 1
	}
	s[0] = errnoSuccess
}

// sortedEnviron renders env as sorted "KEY=VALUE" strings.
func sortedEnviron(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, val := range env {
		out = append(out, k+"="+val)
	}
	sort.Strings(out)
	return out
}

// wasiFdFdstatGet answers for stdout and stderr only: filetype 0, rights_base
// FD_WRITE (64), the rest 0; other fds are EBADF.
func wasiFdFdstatGet(v *VM, s []uint64) {
	if fd := u32(s[0]); fd != 1 && fd != 2 {
		s[0] = errnoBadf
		return
	}
	var stat [24]byte
	binary.LittleEndian.PutUint64(stat[8:], 64)
	if !v.mem.Write(u32(s[1]), stat[:]) {
		s[0] = errnoInval
		return
	}
	s[0] = errnoSuccess
}

// wasiFdWrite logs what the guest writes to fd 1 at info and fd 2 at error, one entry
// per call with one trailing newline removed; other fds are EBADF.
func wasiFdWrite(v *VM, s []uint64) {
	fd, iovs, n, nwrittenPtr := u32(s[0]), u32(s[1]), u32(s[2]), u32(s[3])
	if fd != 1 && fd != 2 {
		s[0] = errnoBadf
		return
	}
	var msg []byte
	for i := uint32(0); i < n; i++ {
		ptr, ok1 := v.mem.ReadUint32Le(iovs + 8*i)
		size, ok2 := v.mem.ReadUint32Le(iovs + 8*i + 4)
		b, ok3 := v.view(ptr, size)
		if !ok1 || !ok2 || !ok3 {
			s[0] = errnoInval
			return
		}
		msg = append(msg, b...)
	}
	if !v.mem.WriteUint32Le(nwrittenPtr, uint32(len(msg))) {
		s[0] = errnoInval
		return
	}
	if l := len(msg); l > 0 && msg[l-1] == '\n' {
		msg = msg[:l-1]
	}
	level := LogInfo
	if fd == 2 {
		level = LogError
	}
	v.p.log(v.index, level, string(msg))
	s[0] = errnoSuccess
}

// wasiPollOneoff is recorded on every call. In the #427 generation it returns ENOSYS,
// as Envoy does (§1.1); the Go runtime then dies. In #533 it writes nevents=0 and
// returns success without sleeping; since the host's monotonic clock is virtual, it
// advances this VM's private monotonic offset by the shortest clock timeout in the
// subscriptions so that a guest sleep ends instead of spinning forever.
func wasiPollOneoff(v *VM, s []uint64) {
	v.p.pollCalls.Add(1)
	if v.p.gen != Gen533 {
		s[0] = errnoNosys
		return
	}
	in, nsubs, neventsPtr := u32(s[0]), u32(s[2]), u32(s[3])
	var shortest time.Duration = -1
	for i := uint32(0); i < nsubs; i++ {
		sub := in + 48*i
		tag, _ := v.mem.ReadByte(sub + 8)
		if tag != 0 { // not a clock subscription
			continue
		}
		timeout, _ := v.mem.ReadUint64Le(sub + 24)
		if d := time.Duration(timeout); shortest < 0 || d < shortest {
			shortest = d
		}
	}
	if shortest > 0 {
		v.monoSkew += shortest
	}
	if !v.mem.WriteUint32Le(neventsPtr, 0) {
		s[0] = errnoInval
		return
	}
	s[0] = errnoSuccess
}

// wasiRandomGet fills the buffer from crypto/rand; more than 64 KiB is EINVAL.
func wasiRandomGet(v *VM, s []uint64) {
	buf, n := u32(s[0]), u32(s[1])
	if n > randomGetMax {
		s[0] = errnoInval
		return
	}
	b, ok := v.view(buf, n)
	if !ok {
		s[0] = errnoInval
		return
	}
	_, _ = rand.Read(b)
	s[0] = errnoSuccess
}
