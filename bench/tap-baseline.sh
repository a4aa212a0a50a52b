#!/usr/bin/env bash
# The A/B twin of `npm run bench:tap`'s no-tap rounds: a copy of this checkout's build (dist/) whose
# front server never looks at the tap hub (its per-request `tap.active` checks taken out), in DIR
# (default: a new temporary directory). Prints the main.js to give BENCH_TAP_BASELINE:
#   BENCH_TAP_BASELINE=$(bench/tap-baseline.sh) BENCH_TAP_KINDS=tap,baseline npm run bench:tap
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${1:-$(mktemp -d -t mesh-tap-baseline-XXXXXX)}"
[ -f "$ROOT/dist/src/edge/front-server.js" ] || { echo "tap-baseline: $ROOT is not built (npm run build)" >&2; exit 1; }
mkdir -p "$DIR"
rm -rf "$DIR/dist"
cp -r "$ROOT/dist" "$DIR/dist"
cp "$ROOT/package.json" "$DIR/package.json"
ln -sfn "$ROOT/node_modules" "$DIR/node_modules"
FRONT="$DIR/dist/src/edge/front-server.js"
# The two places the front server asks the hub per request: a record at the start, an event at the end.
sed -i \
  -e 's/ : tap\.active ? tap\.begin(req, res, trace\.traceId, target\.path) : undefined;/ : undefined;/' \
  -e 's/^\( *\)if (tap\.active)$/\1if (false)/' \
  "$FRONT"
if grep -q 'tap\.active ? tap\.begin' "$FRONT" || ! grep -q 'if (false)' "$FRONT"; then
  echo "tap-baseline: the front server's tap checks were not where this script looks (src/edge/front-server.ts changed): update it" >&2
  exit 1
fi
echo "$DIR/dist/src/cli/main.js"
