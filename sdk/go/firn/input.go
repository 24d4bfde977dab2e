package firn

import (
	"time"
	"unsafe"
)

// RunKind says what started a run.
type RunKind int32

const (
	// KindCall: a direct call (FCALL, POST /v1/functions/{name}/call); Keys and Args are
	// the caller's.
	KindCall RunKind = 0
	// KindPut: a trigger's input that is a put; Keys has the key, Args the new value.
	KindPut RunKind = 1
	// KindDelete: a trigger's input that is a delete; Keys has the key, Args is empty.
	KindDelete RunKind = 2
	// KindTimer: a timer firing; Keys is empty, Args has the timer's payload.
	KindTimer RunKind = 3
	// KindEntry: a trigger's input that is a stream's entry (ON STREAM) or a log tag's
	// record (ON LOG); Keys has the stream or tag, Args the entry's id and then its fields
	// and values (a record: its id and its payload).
	KindEntry RunKind = 4
)

func (k RunKind) String() string {
	switch k {
	case KindCall:
		return "call"
	case KindPut:
		return "put"
	case KindDelete:
		return "delete"
	case KindTimer:
		return "timer"
	case KindEntry:
		return "entry"
	}
	return "unknown"
}

// Kind is what started this run.
func Kind() RunKind { return RunKind(hostKind()) }

// Keys are the run's keys: FCALL's keys, or a trigger's one input key; none for a timer.
func Keys() []string {
	n := hostKeyCount()
	keys := make([]string, 0, n)
	for i := int32(0); i < n; i++ {
		b, _ := fetch(func(buf unsafe.Pointer, capacity int32) int64 {
			return int64(hostKey(i, buf, capacity))
		})
		keys = append(keys, string(b))
	}
	return keys
}

// Args are the run's arguments: FCALL's arguments, a trigger put's new value, or a timer's
// payload.
func Args() [][]byte {
	n := hostArgCount()
	args := make([][]byte, 0, n)
	for i := int32(0); i < n; i++ {
		b, _ := fetch(func(buf unsafe.Pointer, capacity int32) int64 {
			return int64(hostArg(i, buf, capacity))
		})
		args = append(args, b)
	}
	return args
}

// Stamp is the run's time: a trigger's input's commit time, or the time a call or timer was
// stamped. Reads are of the data as it was at this time; time.Now answers it too.
func Stamp() time.Time { return time.UnixMicro(hostStampUs()) }

// InputVersion is the version of a trigger's input key that this run is for; 0 for a call or
// a timer. The key's earlier versions are InputVersion()-1, -2 … (see GetVersion).
func InputVersion() uint64 { return uint64(hostInputVersion()) }
