package firn

import (
	"encoding/binary"
	"slices"
	"testing"
	"unsafe"
)

// host answers a read of value as Firn does: its length, the bytes only when they fit.
func host(value []byte, calls *int) func(unsafe.Pointer, int32) int64 {
	return func(buf unsafe.Pointer, capacity int32) int64 {
		*calls++
		if len(value) <= int(capacity) {
			copy(unsafe.Slice((*byte)(buf), capacity), value)
		}
		return int64(len(value))
	}
}

func TestFetchReadsAgainIntoABufferOfTheAnsweredLength(t *testing.T) {
	for _, n := range []int{0, 1, firstBufBytes, firstBufBytes + 1, 70_000} {
		value := make([]byte, n)
		for i := range value {
			value[i] = byte(i)
		}
		calls := 0
		got, code := fetch(host(value, &calls))
		if code != 0 || !slices.Equal(got, value) || got == nil {
			t.Fatalf("%d bytes: got %d bytes, code %d", n, len(got), code)
		}
		if want := 1 + min(1, n/(firstBufBytes+1)); calls != want {
			t.Fatalf("%d bytes: %d host calls, want %d", n, calls, want)
		}
	}
}

func TestFetchPassesTheHostsCodeOn(t *testing.T) {
	got, code := fetch(func(unsafe.Pointer, int32) int64 { return codeAbsent })
	if got != nil || code != codeAbsent {
		t.Fatalf("got %v, code %d", got, code)
	}
}

func TestFetchGivesUpOnAHostWhoseLengthKeepsGrowing(t *testing.T) {
	n := int64(firstBufBytes)
	_, code := fetch(func(unsafe.Pointer, int32) int64 { n *= 2; return n })
	if code != codeRead {
		t.Fatalf("code %d, want %d", code, codeRead)
	}
}

func TestScanPagesDecodeAndMalformedOnesAreRefused(t *testing.T) {
	var page []byte
	for _, k := range []string{"s/a", "s/bb", ""} {
		page = binary.LittleEndian.AppendUint32(page, uint32(len(k)))
		page = append(page, k...)
	}
	keys, ok := appendScanPage([]string{"first"}, page)
	if !ok || !slices.Equal(keys, []string{"first", "s/a", "s/bb", ""}) {
		t.Fatalf("got %q, %v", keys, ok)
	}
	for _, bad := range [][]byte{page[:2], page[:6], {9, 0, 0, 0, 'x'}} {
		if _, ok := appendScanPage(nil, bad); ok {
			t.Fatalf("page %v decoded", bad)
		}
	}
}

func TestEmptySlicesAndStringsPassPointerZero(t *testing.T) {
	if bytesPtr(nil) != nil || bytesPtr([]byte{}) != nil || stringPtr("") != nil {
		t.Fatal("an empty slice or string passed a non-zero pointer")
	}
	if b := []byte("x"); bytesPtr(b) != unsafe.Pointer(&b[0]) {
		t.Fatal("bytesPtr does not point at the data")
	}
}
