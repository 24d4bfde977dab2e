package firn

import (
	"math"
	"unsafe"
)

// firstBufBytes is the buffer a read starts with; a longer answer is read again into a
// buffer of its exact length, so most small values cost one host call.
const firstBufBytes = 256

// bytesPtr and stringPtr give the host an offset into linear memory. An empty slice or
// string passes 0: taking &b[0] of an empty slice panics, and an empty string may have no
// data at all.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func stringPtr(s string) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.StringData(s))
}

// fetch runs a host read that copies its answer only when it fits and otherwise returns its
// length: when it did not fit, it reads again into a buffer of that length. It returns the
// bytes, or nil and the host's negative code.
func fetch(call func(buf unsafe.Pointer, capacity int32) int64) ([]byte, int64) {
	buf := make([]byte, firstBufBytes)
	// A run's reads are of one fixed cut, so the second try has the length the first said;
	// a third is a host that changed its answer.
	for try := 0; try < 2; try++ {
		n := call(unsafe.Pointer(&buf[0]), int32(len(buf)))
		if n < 0 {
			return nil, n
		}
		if n <= int64(len(buf)) {
			return buf[:n], 0
		}
		if n > math.MaxInt32 {
			return nil, codeLimit // more than a 32-bit module's memory could hold
		}
		buf = make([]byte, n)
	}
	return nil, codeRead
}
