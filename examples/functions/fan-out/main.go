// fan-out: a trigger on the puts under orders/, whose values are JSON orders such as
// {"region":"eu","item":"x"}. Each order is appended to the stream orders:<region> and
// published on the channel orders.<region>, so each region's workers read only theirs:
//
//	FIRN.FUNCTION LOAD fanout <fan-out.wasm>
//	FIRN.TRIGGER CREATE orders ON PREFIX orders/ CALL fanout
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
	// The entry and the message go out together with the run's commit, or not at all.
	if err := firn.XAdd("orders:"+o.Region, "key", key, "order", string(value)); err != nil {
		firn.Log("fan-out: %v", err)
		return 1
	}
	if err := firn.Publish("orders."+o.Region, value); err != nil {
		firn.Log("fan-out: %v", err)
		return 1
	}
	return 0
}
