// Redis transactions through go-redis, unchanged, against a running Firn node: TxPipelined
// (MULTI … EXEC as one pipeline) and Watch (go-redis's optimistic transaction, retried while
// a watched key changes), over keys of different slots (different shards when the node
// holds several), over RESP2 and RESP3.
//
//	cd tests/go-clients && go run . PORT
//
// Keys carry a random prefix, so the program can run against a node that other clients use.
// It exits 1, saying what differed, when any reply is not the one Redis would give.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// slot is a key's Redis cluster slot: CRC16 (XMODEM) of the key, or of its {hash tag} when
// it has a non-empty one, modulo 16384.
func slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for bit := 0; bit < 8; bit++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// keysOfDifferentSlots gives n keys whose slots fall in different thirds of the slot space,
// so in different shards of a three-shard node (which maps slot*3/16384 to a shard).
func keysOfDifferentSlots(prefix string, n int) []string {
	found := map[int]string{}
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		third := slot(k) * 3 / 16384
		if _, ok := found[third]; !ok {
			found[third] = k
			keys = append(keys, k)
		}
	}
	return keys
}

// check collects what differed from what Redis would answer, for one protocol.
type check struct {
	protocol int
	failed   int
}

func (c *check) expect(what string, got, want any) {
	if !reflect.DeepEqual(got, want) {
		c.failed++
		fmt.Printf("go-redis transactions RESP%d: %s: got %#v, want %#v\n", c.protocol, what, got, want)
	}
}

func (c *check) fail(format string, args ...any) {
	c.failed++
	fmt.Printf("go-redis transactions RESP%d: %s\n", c.protocol, fmt.Sprintf(format, args...))
}

// value is a command's value and error as one comparable pair ("" when there is no error).
func value(cmd redis.Cmder) []any {
	errText := ""
	if err := cmd.Err(); err != nil {
		errText = err.Error()
	}
	var v any
	switch c := cmd.(type) {
	case *redis.StatusCmd:
		v = c.Val()
	case *redis.IntCmd:
		v = c.Val()
	case *redis.StringCmd:
		v = c.Val()
	case *redis.SliceCmd:
		v = c.Val()
	default:
		v = fmt.Sprintf("%v", cmd)
	}
	return []any{v, errText}
}

func checkProtocol(ctx context.Context, port string, protocol int) int {
	c := &check{protocol: protocol}
	options := func() *redis.Options {
		return &redis.Options{
			Addr:         "127.0.0.1:" + port,
			Protocol:     protocol,
			ReadTimeout:  20 * time.Second,
			WriteTimeout: 20 * time.Second,
		}
	}
	client := redis.NewClient(options())
	defer client.Close()
	other := redis.NewClient(options())
	defer other.Close()

	tag := make([]byte, 4)
	if _, err := rand.Read(tag); err != nil {
		panic(err)
	}
	keys := keysOfDifferentSlots(fmt.Sprintf("gotx-%s-", hex.EncodeToString(tag)), 3)
	a, b, k := keys[0], keys[1], keys[2]

	// MULTI … EXEC as a pipeline: each command's reply, in order.
	cmds, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Set(ctx, a, 10, 0)
		pipe.IncrBy(ctx, b, 5)
		pipe.Get(ctx, a)
		pipe.MGet(ctx, a, b)
		return nil
	})
	if err != nil {
		c.fail("TxPipelined: %v", err)
		return c.failed
	}
	var got [][]any
	for _, cmd := range cmds {
		got = append(got, value(cmd))
	}
	c.expect("TxPipelined replies", got, [][]any{
		{"OK", ""}, {int64(5), ""}, {"10", ""}, {[]any{"10", "5"}, ""},
	})

	// Watch: a transfer of 1 from a to b, retried as go-redis users do while EXEC answers
	// nil. On the first try another client changes b between the GET and the EXEC.
	tries := 0
	transfer := func(tx *redis.Tx) error {
		tries++
		have, err := tx.Get(ctx, a).Int()
		if err != nil {
			return err
		}
		if tries == 1 {
			if err := other.IncrBy(ctx, b, 100).Err(); err != nil {
				return err
			}
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, a, have-1, 0)
			pipe.IncrBy(ctx, b, 1)
			return nil
		})
		return err
	}
	done := false
	for attempt := 0; attempt < 10 && !done; attempt++ {
		err := client.Watch(ctx, transfer, a, b)
		switch {
		case err == nil:
			done = true
		case errors.Is(err, redis.TxFailedErr):
			if tries == 1 {
				// Nothing of the failed EXEC applied: a as it was, b only bumped by other.
				va, errA := other.Get(ctx, a).Result()
				vb, errB := other.Get(ctx, b).Result()
				c.expect("a and b after the EXEC that failed", []any{va, errA, vb, errB},
					[]any{"10", error(nil), "105", error(nil)})
			}
		default:
			c.fail("Watch: %v", err)
			return c.failed
		}
	}
	if !done {
		c.fail("Watch: no success in %d tries", tries)
		return c.failed
	}
	if tries < 2 {
		c.fail("Watch: EXEC ran on try %d though a watched key changed before it", tries)
	}
	va, _ := client.Get(ctx, a).Result()
	vb, _ := client.Get(ctx, b).Result()
	c.expect("a and b after the transfer", []string{va, vb}, []string{"9", "106"})

	// A queued command that fails when EXEC runs it (INCR of a value that is not an integer)
	// answers its error; the commands around it apply, as in Redis.
	if err := client.Set(ctx, k, "not-a-number", 0).Err(); err != nil {
		c.fail("SET: %v", err)
		return c.failed
	}
	cmds, err = client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Incr(ctx, a)
		pipe.Incr(ctx, k)
		pipe.Set(ctx, b, "7", 0)
		pipe.Get(ctx, k)
		return nil
	})
	if len(cmds) != 4 {
		c.fail("TxPipelined with a failing INCR: %d commands back (%v)", len(cmds), err)
		return c.failed
	}
	var redisErr redis.Error
	if !errors.As(cmds[1].Err(), &redisErr) || !strings.Contains(cmds[1].Err().Error(), "not an integer") {
		c.fail("INCR of a non-integer inside MULTI: got error %v, want Redis's \"ERR value is not an integer or out of range\"", cmds[1].Err())
	}
	c.expect("TxPipelined's error", err, cmds[1].Err())
	c.expect("INCR a inside MULTI", value(cmds[0]), []any{int64(10), ""})
	c.expect("SET b inside MULTI", value(cmds[2]), []any{"OK", ""})
	c.expect("GET k inside MULTI", value(cmds[3]), []any{"not-a-number", ""})
	va, _ = client.Get(ctx, a).Result()
	vb, _ = client.Get(ctx, b).Result()
	vk, _ := client.Get(ctx, k).Result()
	c.expect("a, b and k after the transaction", []string{va, vb, vk}, []string{"10", "7", "not-a-number"})

	client.Del(ctx, a, b, k)
	return c.failed
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: %s PORT\n", os.Args[0])
		os.Exit(2)
	}
	port := os.Args[1]
	if _, err := strconv.Atoi(port); err != nil {
		fmt.Fprintf(os.Stderr, "usage: %s PORT (got %q)\n", os.Args[0], port)
		os.Exit(2)
	}
	// Redis's own examples of slots, so that the keys below do fall in different shards.
	if slot("foo") != 12182 || slot("123456789") != 12739 || slot("{user1000}.following") != slot("user1000") {
		fmt.Println("go-redis transactions: the slot function is not Redis's")
		os.Exit(1)
	}
	ctx := context.Background()
	failed := 0
	for _, protocol := range []int{2, 3} {
		n := checkProtocol(ctx, port, protocol)
		if n == 0 {
			fmt.Printf("go-redis transactions: RESP%d ok\n", protocol)
		}
		failed += n
	}
	if failed > 0 {
		fmt.Printf("go-redis transactions: %d mismatches\n", failed)
		os.Exit(1)
	}
}
