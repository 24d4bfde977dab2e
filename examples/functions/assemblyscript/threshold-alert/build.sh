#!/usr/bin/env bash
# Builds threshold-alert.wasm (AssemblyScript) into the folder $1, or build/ beside this
# script, and checks that the module imports only what Firn provides.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/build}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

cd "$here"
# The lock file pins the compiler; --prefer-offline lets a warm npm cache build without
# the registry.
npm ci --prefer-offline --no-audit --no-fund --loglevel=error
npx asc --target release --outFile "$out/threshold-alert.wasm"

# Firn refuses at load time a module importing anything but "firn" and
# "wasi_snapshot_preview1"; say so here, with the import's name, rather than there.
node -e '
const path = process.argv[1];
const mod = new WebAssembly.Module(require("fs").readFileSync(path));
const foreign = WebAssembly.Module.imports(mod)
  .filter((i) => i.module !== "firn" && i.module !== "wasi_snapshot_preview1")
  .map((i) => i.module + "." + i.name);
if (foreign.length) {
  console.error(path + " imports " + foreign.join(", ") + ", which Firn does not provide");
  process.exit(1);
}
' "$out/threshold-alert.wasm"
echo "$out/threshold-alert.wasm ($(wc -c <"$out/threshold-alert.wasm") bytes)"
