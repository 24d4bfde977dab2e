// rolling-average: a trigger on the puts under sensor/. It writes avg/<device>, the mean of
// the new reading and up to 4 earlier versions of the same key, and counts the readings in
// count/<device>:
//
//	FIRN.FUNCTION LOAD average <rolling-average.wasm>
//	FIRN.TRIGGER CREATE averages ON PREFIX sensor/ CALL average
package main

import (
	"strconv"
	"strings"

	"github.com/firn-db/firn/sdk/go/firn"
)

// window is how many readings the average spans: the new one and window-1 before it.
const window = 5

func main() {}

//go:wasmexport run
func run() int32 {
	// Only a trigger's put has a version whose predecessors are the earlier readings.
	if firn.Kind() != firn.KindPut {
		return 0
	}
	keys, args := firn.Keys(), firn.Args()
	if len(keys) != 1 || len(args) != 1 {
		firn.Log("rolling-average: wants one key and one value; got %d and %d", len(keys), len(args))
		return 1
	}
	key := keys[0]
	device := strings.TrimPrefix(key, "sensor/")
	reading, err := parse(args[0])
	if err != nil {
		firn.Log("rolling-average: %s: %v", key, err)
		return 1
	}
	sum, n := reading, 1
	// The versions before the input, newest first (versions count from 1); a delete or a
	// compacted version is absent.
	input := firn.InputVersion()
	for back := uint64(1); back < window && back < input; back++ {
		b, ok, err := firn.GetVersion(key, input-back)
		if err != nil {
			firn.Log("rolling-average: %v", err)
			return 1
		}
		if !ok {
			continue
		}
		earlier, err := parse(b)
		if err != nil {
			continue // that version's own run failed on it already
		}
		sum += earlier
		n++
	}
	avg := strconv.FormatFloat(sum/float64(n), 'f', 2, 64)
	if err := firn.Put("avg/"+device, []byte(avg)); err != nil {
		firn.Log("rolling-average: %v", err)
		return 1
	}
	// Incr, not Get and Put: this run reads the cut at its input's stamp, which does not hold
	// the count the run before it wrote.
	if err := firn.Incr("count/"+device, 1); err != nil {
		firn.Log("rolling-average: %v", err)
		return 1
	}
	return 0
}

func parse(b []byte) (float64, error) {
	return strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
}
