//go:build tools

// Pins the benchmark tools bench/compare builds: go-ycsb and etcd's benchmark command.
package tools

import (
	_ "github.com/pingcap/go-ycsb/cmd/go-ycsb"
	_ "go.etcd.io/etcd/v3/tools/benchmark"
)
