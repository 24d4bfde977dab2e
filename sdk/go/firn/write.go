package firn

import (
	"encoding/binary"
	"fmt"
)

// Writes are buffered and committed together, atomically, when run returns 0; later reads
// in the same run already see them. An error here means the write was refused; the writes
// before it are still buffered, so return non-zero to drop them all.

// Put sets key to value.
func Put(key string, value []byte) error {
	return written("put", key, hostPut(stringPtr(key), int32(len(key)), bytesPtr(value), int32(len(value))))
}

// Del deletes key.
func Del(key string) error {
	return written("del", key, hostDel(stringPtr(key), int32(len(key))))
}

// Incr adds delta to the integer value of key (an absent key counts as 0). Counting with
// Incr, rather than Get and Put, stays right when runs for several inputs commit in turn:
// a run reads the cut at its own stamp, which does not hold the outputs of earlier runs.
func Incr(key string, delta int64) error {
	return written("incr", key, hostIncr(stringPtr(key), int32(len(key)), delta))
}

// XAdd appends an entry with an automatic id to the stream, as XADD stream * f1 v1 f2 v2 ….
func XAdd(stream string, fieldsAndValues ...string) error {
	if len(fieldsAndValues) == 0 || len(fieldsAndValues)%2 != 0 {
		return &Error{Op: "xadd", Key: stream, Err: fmt.Errorf(
			"an entry needs field-value pairs; got %d strings", len(fieldsAndValues))}
	}
	fields := encodeItems(fieldsAndValues)
	return written("xadd", stream, hostXAdd(stringPtr(stream), int32(len(stream)), bytesPtr(fields), int32(len(fields))))
}

// LogAppend appends a record with tags (1 to 16; the first names the shard that keeps it)
// and payload to log, as FIRN.LOG APPEND log TAGS n tag… payload, committed with the
// run's other writes. Its seq is the commit's stamp; readers of each tag see it in order.
func LogAppend(log string, tags []string, payload []byte) error {
	if len(tags) == 0 {
		return &Error{Op: "log_append", Key: log, Err: fmt.Errorf("a record needs a tag")}
	}
	encoded := encodeItems(tags)
	return written("log_append", log, hostLogAppend(stringPtr(log), int32(len(log)),
		bytesPtr(encoded), int32(len(encoded)), bytesPtr(payload), int32(len(payload))))
}

// encodeItems encodes strings as [u32 little-endian length][bytes]… (xadd's fields,
// log_append's tags).
func encodeItems(items []string) []byte {
	size := 0
	for _, s := range items {
		size += 4 + len(s)
	}
	out := make([]byte, 0, size)
	for _, s := range items {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
		out = append(out, s...)
	}
	return out
}

// Publish sends msg to the pub/sub channel once the run's writes have committed (never, if
// the run fails).
func Publish(channel string, msg []byte) error {
	return written("publish", channel, hostPublish(stringPtr(channel), int32(len(channel)), bytesPtr(msg), int32(len(msg))))
}

// Reply sets the answer FCALL returns (a bulk string).
func Reply(b []byte) {
	hostReply(bytesPtr(b), int32(len(b)))
}

// Log writes one line, formatted as fmt.Sprintf does, into the node's log for the operator.
// A run's log is bounded; what goes past the bound is dropped.
func Log(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	hostLog(stringPtr(line), int32(len(line)))
}

func written(op, key string, code int32) error {
	if code >= 0 {
		return nil
	}
	return hostError(op, key, int64(code))
}
