package firn

import (
	"encoding/binary"
	"time"
	"unsafe"
)

// Reads see the data as it was at the run's Stamp — one consistent cut across every key and
// shard — together with the run's own earlier writes.

// Get is the key's value; false when the key has no value.
func Get(key string) ([]byte, bool, error) {
	return value("get", key, func(buf unsafe.Pointer, capacity int32) int64 {
		return hostGet(stringPtr(key), int32(len(key)), buf, capacity)
	})
}

// GetVersion is one version of the key; false when that version is absent: never written,
// a delete, or compacted away.
func GetVersion(key string, version uint64) ([]byte, bool, error) {
	return value("get_version", key, func(buf unsafe.Pointer, capacity int32) int64 {
		return hostGetVersion(stringPtr(key), int32(len(key)), int64(version), buf, capacity)
	})
}

// GetAt is the key's value as it was at an earlier time t (microsecond precision); false
// when it had none then.
func GetAt(key string, t time.Time) ([]byte, bool, error) {
	return value("get_at", key, func(buf unsafe.Pointer, capacity int32) int64 {
		return hostGetAt(stringPtr(key), int32(len(key)), t.UnixMicro(), buf, capacity)
	})
}

func value(op, key string, call func(unsafe.Pointer, int32) int64) ([]byte, bool, error) {
	b, code := fetch(call)
	switch {
	case code == codeAbsent:
		return nil, false, nil
	case code < 0:
		return nil, false, hostError(op, key, code)
	}
	return b, true, nil
}

// Scan is every key under prefix, in key order. It reads a page of at most 1000 keys per
// host call, so a large prefix costs many calls against the run's limit of host calls.
func Scan(prefix string) ([]string, error) {
	var keys []string
	buf := make([]byte, scanBufBytes)
	after := ""
	for {
		n := hostScan(stringPtr(prefix), int32(len(prefix)), stringPtr(after), int32(len(after)),
			unsafe.Pointer(&buf[0]), int32(len(buf)))
		switch {
		case n == 0:
			return keys, nil
		case n == codeTooSmall && len(buf) < scanBufBytesMax:
			buf = make([]byte, 2*len(buf))
			continue
		case n < 0:
			return nil, hostError("scan", prefix, n)
		case n > int64(len(buf)):
			return nil, &Error{Op: "scan", Key: prefix, Err: ErrRead}
		}
		var ok bool
		if keys, ok = appendScanPage(keys, buf[:n]); !ok || keys[len(keys)-1] <= after {
			// A malformed page, or one that does not move past `after` (which would loop).
			return nil, &Error{Op: "scan", Key: prefix, Err: ErrRead}
		}
		after = keys[len(keys)-1]
	}
}

const (
	// scanBufBytes holds the longest key (8 KiB) with its length, and usually many keys.
	scanBufBytes    = 16 << 10
	scanBufBytesMax = 1 << 20
)

// Record is one record of a log tag, or one entry of a stream, as LogRead answers it.
type Record struct {
	// ID is the record's id, "ms-n" (a stream entry's id).
	ID string
	// Payload is the record's payload; a stream entry's is its fields and values (see
	// Fields).
	Payload []byte
}

// Fields are a stream entry's fields and values, in order: field, value, field, value….
func (r Record) Fields() ([]string, bool) {
	return appendScanPage(nil, r.Payload)
}

// LogRead reads the records of tag in log after the id after ("" for the first), oldest
// first, as of the run's cut (a trigger's: its input's stamp): one page of up to 1,000
// records — call it again with the last one's ID for more; none when there are no more. A
// stream is the tag of its own name: LogRead(s, s, after).
func LogRead(log, tag, after string) ([]Record, error) {
	buf := make([]byte, scanBufBytes)
	for {
		n := hostLogRead(stringPtr(log), int32(len(log)), stringPtr(tag), int32(len(tag)),
			stringPtr(after), int32(len(after)), unsafe.Pointer(&buf[0]), int32(len(buf)))
		switch {
		case n == 0:
			return nil, nil
		case n == codeTooSmall && len(buf) < logBufBytesMax:
			buf = make([]byte, 2*len(buf))
			continue
		case n < 0:
			return nil, hostError("log_read", tag, n)
		case n > int64(len(buf)):
			return nil, &Error{Op: "log_read", Key: tag, Err: ErrRead}
		}
		items, ok := appendScanPage(nil, buf[:n])
		if !ok || len(items)%2 != 0 {
			return nil, &Error{Op: "log_read", Key: tag, Err: ErrRead}
		}
		records := make([]Record, 0, len(items)/2)
		for i := 0; i < len(items); i += 2 {
			records = append(records, Record{ID: items[i], Payload: []byte(items[i+1])})
		}
		return records, nil
	}
}

// logBufBytesMax holds the largest record a store keeps (16 MiB) with its id.
const logBufBytesMax = 32 << 20

// appendScanPage decodes a page of [u32 little-endian length][key bytes] items.
func appendScanPage(keys []string, page []byte) ([]string, bool) {
	for len(page) > 0 {
		if len(page) < 4 {
			return keys, false
		}
		n := binary.LittleEndian.Uint32(page)
		if uint64(n) > uint64(len(page)-4) {
			return keys, false
		}
		keys = append(keys, string(page[4:4+n]))
		page = page[4+n:]
	}
	return keys, true
}
