#!/usr/bin/env bash
# Builds every example function into <name>.wasm, beside this script or in the folder $1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

for dir in "$here"/*/; do
	[[ -f "$dir/main.go" ]] || continue
	name="$(basename "$dir")"
	(cd "$dir" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$out/$name.wasm" .)
	echo "$out/$name.wasm ($(wc -c <"$out/$name.wasm") bytes)"
done
