package service

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// connLogEvery bounds the log of the connections the budget closes: one line per interval at
// most, with the counts since the last.
const connLogEvery = 10 * time.Second

// WatchConns counts the connections conns closes on meshlimit_conns_closed_total{reason} of
// m's registry and logs them on log, at most once per connLogEvery. It sets conns.OnClose:
// call it before the listeners accept.
func (m *Metrics) WatchConns(conns *ConnBudget, log *slog.Logger) {
	reg := m.Registry()
	closed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshlimit_conns_closed_total",
		Help: "Connections the -max-conns budget closed, by reason (reclaimed_unproven: held, no request or RPC completed; reclaimed_quiet: held and quiet; refused: new, every held one busy).",
	}, []string{"reason"})
	reg.MustRegister(closed)
	counters := map[ConnClosure]prometheus.Counter{}
	for _, r := range []ConnClosure{ClosedUnproven, ClosedQuiet, ClosedRefused} {
		counters[r] = closed.WithLabelValues(string(r))
	}
	var mu sync.Mutex
	var last time.Time
	since := map[ConnClosure]int{}
	conns.OnClose = func(why ConnClosure) {
		counters[why].Inc()
		mu.Lock()
		defer mu.Unlock()
		since[why]++
		if now := time.Now(); now.Sub(last) >= connLogEvery {
			log.Warn("-max-conns: connections closed to keep the budget", "reclaimed_unproven", since[ClosedUnproven],
				"reclaimed_quiet", since[ClosedQuiet], "refused", since[ClosedRefused])
			last, since = now, map[ConnClosure]int{}
		}
	}
}
