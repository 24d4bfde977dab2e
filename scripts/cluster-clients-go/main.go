// Writes and reads 300 keys through go-redis's ClusterClient (see scripts/cluster-clients).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7379"}})
	for i := 0; i < 300; i++ {
		if err := c.Set(ctx, fmt.Sprintf("go%d", i), fmt.Sprintf("v%d", i), 0).Err(); err != nil {
			panic(err)
		}
	}
	bad := 0
	for i := 0; i < 300; i++ {
		v, err := c.Get(ctx, fmt.Sprintf("go%d", i)).Result()
		if err != nil || v != fmt.Sprintf("v%d", i) {
			bad++
		}
	}
	fmt.Println("go-redis ClusterClient: 300 set/get, wrong:", bad)
	if bad > 0 {
		os.Exit(1)
	}
}
