package rls

import (
	"context"

	"google.golang.org/grpc/stats"

	"github.com/meshlimit/meshlimit/service"
)

// connWork is the stats handler that reports each RPC's start and end to the connection
// budget, so that a connection is judged quiet by its RPCs: a connection that only sends
// control frames (WINDOW_UPDATE, PING) completes none and is the first closed to make room.
type connWork struct{ b *service.ConnBudget }

type connWorkKey struct{}

// TagConn finds the budget's record of the connection, kept in its context.
func (h connWork) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if w := h.b.Work(info.LocalAddr, info.RemoteAddr); w != nil {
		return context.WithValue(ctx, connWorkKey{}, w)
	}
	return ctx
}

// HandleRPC notes an RPC's start (its headers) and its end.
func (connWork) HandleRPC(ctx context.Context, s stats.RPCStats) {
	w, _ := ctx.Value(connWorkKey{}).(*service.ConnWork)
	if w == nil {
		return
	}
	switch s.(type) {
	case *stats.Begin:
		w.Begin()
	case *stats.End:
		w.End()
	}
}

// TagRPC implements stats.Handler.
func (connWork) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (connWork) HandleConn(context.Context, stats.ConnStats) {}
