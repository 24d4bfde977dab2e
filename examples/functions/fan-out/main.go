// fan-out: a trigger on the puts under orders/, whose values are JSON orders such as
// {"region":"eu","item":"x"}. Each order is appended to the log orders under the tag
// region:<region> (and published on the channel orders.<region>), so each region's workers
// read only theirs — FIRN.LOG NEXT orders region:eu <seq>, or a trigger of their own:
//
//	FIRN.FUNCTION LOAD fanout <fan-out.wasm>
//	FIRN.TRIGGER CREATE orders ON PREFIX orders/ CALL fanout
//	FIRN.TRIGGER CREATE eu-orders ON LOG orders TAG region:eu CALL …
//
// It can be tried directly too: FCALL fanout 1 orders/17 '{"region":"eu","item":"x"}'
package main

import (
	"encoding/json"

	"github.com/firn-db/firn/sdk/go/firn"
)

type order struct {
	Region string `json:"region"`
}

func main() {}

//go:wasmexport run
func run() int32 {
	kind := firn.Kind()
	if kind != firn.KindPut && kind != firn.KindCall {
		return 0 // a deleted order has nothing to send
	}
	keys, args := firn.Keys(), firn.Args()
	if len(keys) != 1 || len(args) != 1 {
		firn.Log("fan-out: wants one key and one value; got %d and %d", len(keys), len(args))
		return 1
	}
	key, value := keys[0], args[0]
	var o order
	if err := json.Unmarshal(value, &o); err != nil || o.Region == "" {
		firn.Log("fan-out: %s is not an order with a region: %q", key, value)
		return 1
	}
	// The record commits with the run's other writes (and the trigger's progress): once,
	// or not at all. The message goes out after the commit.
	if err := firn.LogAppend("orders", []string{"region:" + o.Region}, value); err != nil {
		firn.Log("fan-out: %v", err)
		return 1
	}
	if err := firn.Publish("orders."+o.Region, value); err != nil {
		firn.Log("fan-out: %v", err)
		return 1
	}
	return 0
}
