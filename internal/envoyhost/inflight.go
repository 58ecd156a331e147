package envoyhost

// CallsInFlight reports how many of the plugin's HTTP calls (proxy_http_call, from every VM) are
// dispatched and not yet answered: a call counts until its callback has returned, or until it is
// cancelled. Tests that advance the virtual clock to fire ticks that call out wait for it to reach 0
// before they look at what the answers did.
func (p *Plugin) CallsInFlight() int { return int(p.inflight.Load()) }
