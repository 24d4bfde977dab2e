//go:build wasip1

package firn

import "unsafe"

// The host functions Firn provides to every run (module "firn"). Pointers are offsets into
// this module's linear memory; Go's wasm ABI passes an unsafe.Pointer as one i32.

//go:wasmimport firn kind
func hostKind() int32

//go:wasmimport firn key_count
func hostKeyCount() int32

//go:wasmimport firn key
func hostKey(i int32, buf unsafe.Pointer, capacity int32) int32

//go:wasmimport firn arg_count
func hostArgCount() int32

//go:wasmimport firn arg
func hostArg(i int32, buf unsafe.Pointer, capacity int32) int32

//go:wasmimport firn stamp_us
func hostStampUs() int64

//go:wasmimport firn input_version
func hostInputVersion() int64

//go:wasmimport firn get
func hostGet(kp unsafe.Pointer, kl int32, buf unsafe.Pointer, capacity int32) int64

//go:wasmimport firn get_version
func hostGetVersion(kp unsafe.Pointer, kl int32, version int64, buf unsafe.Pointer, capacity int32) int64

//go:wasmimport firn get_at
func hostGetAt(kp unsafe.Pointer, kl int32, atUs int64, buf unsafe.Pointer, capacity int32) int64

//go:wasmimport firn scan
func hostScan(pp unsafe.Pointer, pl int32, afterP unsafe.Pointer, afterL int32, buf unsafe.Pointer, capacity int32) int64

//go:wasmimport firn log_read
func hostLogRead(lp unsafe.Pointer, ll int32, tp unsafe.Pointer, tl int32, afterP unsafe.Pointer, afterL int32, buf unsafe.Pointer, capacity int32) int64

//go:wasmimport firn put
func hostPut(kp unsafe.Pointer, kl int32, vp unsafe.Pointer, vl int32) int32

//go:wasmimport firn del
func hostDel(kp unsafe.Pointer, kl int32) int32

//go:wasmimport firn incr
func hostIncr(kp unsafe.Pointer, kl int32, delta int64) int32

//go:wasmimport firn xadd
func hostXAdd(sp unsafe.Pointer, sl int32, fp unsafe.Pointer, fl int32) int32

//go:wasmimport firn log_append
func hostLogAppend(lp unsafe.Pointer, ll int32, tp unsafe.Pointer, tl int32, pp unsafe.Pointer, pl int32) int32

//go:wasmimport firn publish
func hostPublish(cp unsafe.Pointer, cl int32, mp unsafe.Pointer, ml int32) int32

//go:wasmimport firn reply
func hostReply(p unsafe.Pointer, l int32)

//go:wasmimport firn log
func hostLog(p unsafe.Pointer, l int32)
