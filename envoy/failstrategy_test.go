package envoy

import (
	"fmt"

	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
)

// checkFailStrategy checks that envoy.yaml and the Istio WasmPlugin do the same when the plugin cannot
// run (it does not load or start, or its VM traps): both fail closed. Panics inside the filter are
// recovered per request, so this covers only a broken rollout or a fault the filter cannot recover from,
// and an unlimited worker must never be the silent answer to either. (The TrafficExtension is checked
// against the WasmPlugin field by field.)
func checkFailStrategy(b bundle) error {
	data, err := b.file("envoy.yaml")
	if err != nil {
		return err
	}
	bs, err := decodeBootstrap(data)
	if err != nil {
		return err
	}
	hcms, err := connectionManagers(bs)
	if err != nil {
		return err
	}
	plugins, err := wasmPlugins(hcms)
	if err != nil {
		return err
	}
	_, wp, err := loadWasmPlugin(b)
	if err != nil {
		return err
	}
	istioOpen := wp.GetFailStrategy() == extensionsv1alpha1.FailStrategy_FAIL_OPEN
	for _, p := range plugins {
		if p.GetFailOpen() != istioOpen {
			return fmt.Errorf("fail strategies disagree: envoy.yaml's plugin %q has fail_open: %t, the WasmPlugin failStrategy: %s",
				p.GetName(), p.GetFailOpen(), wp.GetFailStrategy())
		}
		if p.GetFailOpen() {
			return fmt.Errorf("plugin %q fails open: a plugin that cannot run would leave its worker unlimited", p.GetName())
		}
	}
	return nil
}
