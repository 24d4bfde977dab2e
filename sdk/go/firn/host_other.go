//go:build !wasip1

package firn

import "unsafe"

// Outside a Firn run there is no host: these stand-ins let a function's package build, vet
// and unit-test its own logic on the developer's machine, and stop loudly if called.

const notInFirn = "firn: host functions exist only inside a Firn run (build with GOOS=wasip1 GOARCH=wasm)"

func hostKind() int32                            { panic(notInFirn) }
func hostKeyCount() int32                        { panic(notInFirn) }
func hostKey(int32, unsafe.Pointer, int32) int32 { panic(notInFirn) }
func hostArgCount() int32                        { panic(notInFirn) }
func hostArg(int32, unsafe.Pointer, int32) int32 { panic(notInFirn) }
func hostStampUs() int64                         { panic(notInFirn) }
func hostInputVersion() int64                    { panic(notInFirn) }
func hostGet(unsafe.Pointer, int32, unsafe.Pointer, int32) int64 {
	panic(notInFirn)
}
func hostGetVersion(unsafe.Pointer, int32, int64, unsafe.Pointer, int32) int64 {
	panic(notInFirn)
}
func hostGetAt(unsafe.Pointer, int32, int64, unsafe.Pointer, int32) int64 {
	panic(notInFirn)
}
func hostScan(unsafe.Pointer, int32, unsafe.Pointer, int32, unsafe.Pointer, int32) int64 {
	panic(notInFirn)
}
func hostLogRead(unsafe.Pointer, int32, unsafe.Pointer, int32, unsafe.Pointer, int32, unsafe.Pointer, int32) int64 {
	panic(notInFirn)
}
func hostPut(unsafe.Pointer, int32, unsafe.Pointer, int32) int32     { panic(notInFirn) }
func hostDel(unsafe.Pointer, int32) int32                            { panic(notInFirn) }
func hostIncr(unsafe.Pointer, int32, int64) int32                    { panic(notInFirn) }
func hostXAdd(unsafe.Pointer, int32, unsafe.Pointer, int32) int32    { panic(notInFirn) }
func hostPublish(unsafe.Pointer, int32, unsafe.Pointer, int32) int32 { panic(notInFirn) }
func hostLogAppend(unsafe.Pointer, int32, unsafe.Pointer, int32, unsafe.Pointer, int32) int32 {
	panic(notInFirn)
}
func hostReply(unsafe.Pointer, int32) { panic(notInFirn) }
func hostLog(unsafe.Pointer, int32)   { panic(notInFirn) }
