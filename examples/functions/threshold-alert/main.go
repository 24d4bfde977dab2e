// threshold-alert: a trigger on the puts under sensor/. A reading above the threshold (the
// key config/threshold, 30 when unset) appends an entry to the stream alerts:
//
//	FIRN.FUNCTION LOAD alert <threshold-alert.wasm>
//	FIRN.TRIGGER CREATE alerts ON PREFIX sensor/ CALL alert
//
// It can be tried directly too: FCALL alert 1 sensor/7 31.5
package main

import (
	"strconv"
	"strings"

	"github.com/firn-db/firn/sdk/go/firn"
)

const defaultThreshold = 30.0

func main() {}

//go:wasmexport run
func run() int32 {
	kind := firn.Kind()
	if kind != firn.KindPut && kind != firn.KindCall {
		return 0 // a deleted reading is not above anything
	}
	keys, args := firn.Keys(), firn.Args()
	if len(keys) != 1 || len(args) != 1 {
		firn.Log("threshold-alert: wants one key and one value; got %d and %d", len(keys), len(args))
		return 1
	}
	key, text := keys[0], strings.TrimSpace(string(args[0]))
	reading, err := strconv.ParseFloat(text, 64)
	if err != nil {
		// Failing sends the input to the trigger's dead-letter stream, where it can be seen.
		firn.Log("threshold-alert: %s is %q, not a number", key, text)
		return 1
	}
	limit, err := threshold()
	if err != nil {
		firn.Log("threshold-alert: %v", err)
		return 1
	}
	if reading <= limit {
		return 0
	}
	if err := firn.XAdd("alerts", "sensor", key, "value", text); err != nil {
		firn.Log("threshold-alert: %v", err)
		return 1
	}
	return 0
}

// threshold is config/threshold as it was when the reading was written (a run reads at its
// input's stamp), so running the trigger again over history raises the same alerts.
func threshold() (float64, error) {
	b, ok, err := firn.Get("config/threshold")
	if err != nil || !ok {
		return defaultThreshold, err
	}
	t, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return 0, err
	}
	return t, nil
}
