package envoyhost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// HTTPProxy serves real HTTP through a plugin, as an Envoy listener with one HTTP filter and one
// upstream would: each request goes to the next worker VM in turn, through the filter's request
// callbacks; a local reply is written back as is; otherwise the request, with the headers as the filter
// left them, is sent to the upstream, and the upstream's response goes back through the filter's
// response callbacks. Request and response bodies are buffered whole (at most MaxBody bytes).
//
// Headers reach the filter as Envoy's HTTP/1 codec fills its header maps: one entry per header line,
// so proxy_get_header_map_value sees the first value of a repeated header and
// proxy_get_header_map_pairs all of them; only x-forwarded-for is one joined entry, with the peer
// appended, as Envoy joins the headers it indexes. The upstream's response headers are delivered the
// same way (one entry per line).
//
// It is for demos and load tests on loopback; it is not Envoy's connection manager (no retries, no
// streaming, no HTTP/2 upstream).
type HTTPProxy struct {
	// Plugin runs the filter. Requests go to its worker VMs (not the main-thread VM).
	Plugin *Plugin
	// Upstream is the base URL requests are forwarded to, e.g. "http://127.0.0.1:8080".
	Upstream string
	// RouteName picks xds.route_name for a request (Envoy takes it from the matched route); nil
	// means no route name.
	RouteName func(*http.Request) string
	// Timeout bounds one request's wait for the filter (a paused request) and the upstream.
	// Zero means 10 s.
	Timeout time.Duration
	// MaxBody bounds buffered bodies; zero means 1 MiB.
	MaxBody int64
	// Client sends upstream requests; nil means a client with keep-alive connections.
	Client *http.Client

	next atomic.Uint64
}

// ServeHTTP implements http.Handler.
func (x *HTTPProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	timeout, maxBody := x.Timeout, x.MaxBody
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if maxBody == 0 {
		maxBody = 1 << 20
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	workers := len(x.Plugin.vms) - 1
	if workers < 1 {
		workers = 1
	}
	vm := x.Plugin.VM(int(x.next.Add(1)-1) % workers)

	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || int64(len(body)) > maxBody {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	info := StreamInfo{SourceAddress: r.RemoteAddr, Protocol: r.Proto}
	if x.RouteName != nil {
		info.RouteName = x.RouteName(r)
	}
	s := vm.NewStream(info)
	defer func() { _ = s.Close() }()
	if _, err := s.SendRequestHeaders(requestHeaders(r), len(body) == 0); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if len(body) > 0 {
		if _, err := s.SendRequestBody(body, true); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	act, err := s.Wait(ctx)
	if err != nil {
		http.Error(w, "the filter did not resume the request: "+err.Error(), http.StatusGatewayTimeout)
		return
	}
	if act == ActionStop {
		writeLocalReply(w, s)
		return
	}
	resp, err := x.forward(ctx, s.UpstreamHeaders(), s.UpstreamBody(), body, maxBody)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	if _, err := s.SendResponseHeaders(resp.Headers, len(resp.Body) == 0); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if len(resp.Body) > 0 {
		if _, err := s.SendResponseBody(resp.Body, true); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	if act, err = s.Wait(ctx); err != nil || act == ActionStop {
		if s.LocalReply() != nil {
			writeLocalReply(w, s)
			return
		}
		http.Error(w, "the filter stopped the response", http.StatusBadGateway)
		return
	}
	writeResponse(w, s.DownstreamHeaders(), resp.Body)
}

// requestHeaders converts r's headers the way Envoy's HTTP/1 codec fills a request header map: one
// entry per header line, so a repeated header keeps each value (proxy_get_header_map_value returns
// the first, proxy_get_header_map_pairs all of them). x-forwarded-for is the exception, as for
// Envoy, which joins the values of the headers it indexes: its lines are joined with "," and the
// peer address is appended (use_remote_address). Net/http does not keep the order between
// different header names, so names are sorted; the values of one name keep their order.
func requestHeaders(r *http.Request) Headers {
	path := r.URL.RequestURI()
	h := Headers{{":method", r.Method}, {":path", path}, {":authority", r.Host}, {":scheme", "http"}}
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	xff := ""
	for _, name := range names {
		values := r.Header[name]
		if strings.EqualFold(name, "x-forwarded-for") {
			xff = strings.Join(values, ",")
			continue
		}
		for _, v := range values {
			h = append(h, [2]string{strings.ToLower(name), v})
		}
	}
	if peer, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if xff != "" {
			xff += ","
		}
		xff += peer
	}
	if xff != "" {
		h = append(h, [2]string{"x-forwarded-for", xff})
	}
	return h
}

// forward sends the request as the filter left it to the upstream.
func (x *HTTPProxy) forward(ctx context.Context, h Headers, filtered, original []byte, maxBody int64) (*Response, error) {
	body := original
	if filtered != nil {
		body = filtered
	}
	method, _ := h.Get(":method")
	path, _ := h.Get(":path")
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(x.Upstream, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, kv := range h {
		if strings.HasPrefix(kv[0], ":") || kv[0] == "content-length" {
			continue
		}
		req.Header.Add(kv[0], kv[1])
	}
	if a, ok := h.Get(":authority"); ok {
		req.Host = a
	}
	c := x.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	out := &Response{Headers: Headers{{":status", strconv.Itoa(resp.StatusCode)}}, Body: b}
	names := make([]string, 0, len(resp.Header))
	for name := range resp.Header {
		if !strings.EqualFold(name, "content-length") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range resp.Header[name] { // one entry per header line, as Envoy keeps them
			out.Headers = append(out.Headers, [2]string{strings.ToLower(name), v})
		}
	}
	return out, nil
}

func writeLocalReply(w http.ResponseWriter, s *Stream) {
	lr := s.LocalReply()
	h := lr.Headers
	if lr.GRPCStatus >= 0 {
		h = append(h.Clone(), [2]string{"grpc-status", strconv.Itoa(int(lr.GRPCStatus))}, [2]string{"grpc-message", string(lr.Body)})
	}
	if dh := s.DownstreamHeaders(); dh != nil { // the filter saw its own reply in on_response_headers
		h = dh
	} else {
		h = append(Headers{{":status", strconv.Itoa(lr.Status)}}, h...)
	}
	writeResponse(w, h, lr.Body)
}

func writeResponse(w http.ResponseWriter, h Headers, body []byte) {
	status := http.StatusOK
	for _, kv := range h {
		if kv[0] == ":status" {
			if n, err := strconv.Atoi(kv[1]); err == nil {
				status = n
			}
			continue
		}
		w.Header().Add(kv[0], kv[1])
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ListenAndServe serves the proxy on a loopback address ("127.0.0.1:0" picks a port) until ctx is done,
// and returns the address it listens on through ready.
func (x *HTTPProxy) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("envoyhost: HTTPProxy listens on loopback only, not %q", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: x, ReadHeaderTimeout: 5 * time.Second}
	if ready != nil {
		ready(l.Addr())
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != http.ErrServerClosed {
		return err
	}
	return nil
}
