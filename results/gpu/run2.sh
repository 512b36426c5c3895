#!/bin/bash
# The owed GPU runs (issues 7 and 24) in one device call. Phases end by a deadline so
# whatever finished comes back: each phase is tarred into $OUT as soon as it ends.
# Env: BIG (the model), DEV (cuda), BUDGET (seconds for the whole script), LIM1 (items
# at batch 1), SETUP=0 to skip the install (a local dry run).
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-570}
BIG=${BIG:-random:llama-3-8b}
DEV=${DEV:-cuda}
LIM1=${LIM1:-16}
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpuout}
mkdir -p "$OUT"
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET - ( $(date +%s) - T0 ) - 12 )); }
cap() { local l; l=$(left); if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi; }
pack() { tar czf "$OUT/$1.tgz" -C "$OUT" "$1" 2>/dev/null && rm -rf "${OUT:?}/$1"; log "packed $1 ($(du -h "$OUT/$1.tgz" | cut -f1))"; }

if [ "${SETUP:-1}" = 1 ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
  $PY setup.py -q build_ext --inplace -j 16 >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 4; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"
fi
log "built"
$PY -c "import sys, importlib.metadata as m; print(sys.version.split()[0], *(f'{p} {m.version(p)}' for p in ('torch', 'transformers', 'numpy', 'llguidance', 'xgrammar', 'outlines_core', 'cython')))"

VOCAB="--vocab llama3:.gpu/llama-3/tokenizer.model --data .gpu/maskbench64"
ENGINES="peer:llguidance peer:xgrammar llguidance outlines xgrammar"
G="$PY -m toolkit generate"

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
