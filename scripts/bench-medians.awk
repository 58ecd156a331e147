# Prints the median of each metric over the -count runs of `go test -bench` output, one line per
# benchmark and unit, for the benchmarks whose name matches `bench` and the units matching `units`
# (both regular expressions; default: all).
#
#   awk -v bench='^BenchmarkBufferingMemory' -v units='guest-bytes' -f scripts/bench-medians.awk build/bench-buffering.txt
/^Benchmark/ {
	name = $1
	sub(/-[0-9]+$/, "", name)
	if (bench != "" && name !~ bench) next
	for (i = 3; i < NF; i += 2) {
		if (units != "" && $(i + 1) !~ units) continue
		key = name SUBSEP $(i + 1)
		if (!(key in n)) order[++keys] = key
		vals[key, ++n[key]] = $i + 0
	}
}
END {
	for (k = 1; k <= keys; k++) {
		key = order[k]
		m = n[key]
		for (i = 1; i <= m; i++) v[i] = vals[key, i]
		for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
		split(key, parts, SUBSEP)
		printf "%-45s %-40s %14.2f  (median of %d)\n", parts[1], parts[2], v[int((m + 1) / 2)], m
	}
}
