// Package firn is the Go SDK for Firn functions: WebAssembly modules that Firn runs next to
// its data, called directly (FCALL), by a trigger on each committed change under a prefix,
// or by a timer.
//
// A function is a main package with an empty main and one exported run:
//
//	package main
//
//	import "github.com/firn-db/firn/sdk/go/firn"
//
//	func main() {}
//
//	//go:wasmexport run
//	func run() int32 {
//		key := firn.Keys()[0]
//		if err := firn.Incr("count/"+key, 1); err != nil {
//			firn.Log("counting %s: %v", key, err)
//			return 1 // the run failed: none of its writes are kept
//		}
//		return 0
//	}
//
// Build it as a WASI reactor (Go 1.24 or later):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o fn.wasm .
//
// and load the module with `FIRN.FUNCTION LOAD name` (RESP) or `PUT /v1/functions/{name}`
// (HTTP).
//
// An instance may serve several runs in a row, so package variables may carry over from one
// run to the next: keep nothing there that a run relies on (keys are for that). A run is deterministic: its reads see the consistent cut at the run's stamp
// (Stamp) plus its own earlier writes, time.Now is that stamp, and math/rand is seeded from
// the function, its input and the stamp. Writes are buffered and committed together,
// atomically, when run returns 0; a run that returns anything else, panics or passes a
// limit writes nothing.
//
// Outside a Firn run (a unit test on the developer's machine) the package still builds, but
// every function in it panics.
package firn
