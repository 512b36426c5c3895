#!/bin/bash
# The second device call: eager decoding with a static and a dynamic cache.
source "$(dirname "$0")/common.sh"

# eager with a static cache (no KV growth) and the interleaved baseline, then the
# same with the dynamic cache: is the slow first group of each eager run the cache's?
for cache in static dynamic; do
  log "eager-$cache: $(left)s"
  timeout "$(left)" $G --engine $ENGINES --model "$BIG" --device "$DEV" $VOCAB --limit 8 --batch 1 8 --max-tokens 64 \
    --temperature 1 --cache $cache --unconstrained-baseline --compile-once --compile-timeout 20 --no-compare-kernels \
    --out "$OUT/eager-$cache" >"$OUT/eager-$cache.log" 2>&1
  log "eager-$cache rc=$?"; tail -14 "$OUT/eager-$cache.log"; mv "$OUT/eager-$cache.log" "$OUT/eager-$cache/" 2>/dev/null; pack eager-$cache
done
log "done"
