#!/bin/bash
# What the device calls share (sourced by run.sh ... run6.sh in this
# folder): settings, the deadline helpers, the install of the carried wheels and the
# in-place build.  Run a call (e.g. `bash scripts/gpu/run4.sh`) on a copy of the
# repository that holds the ignored `.whl/` (wheels) and `.gpu/` (tokenizer, schemas),
# made by `bash scripts/gpu/prepare.sh`;
# the four calls' outputs are in results/gpu/ (its README; the scripts were there then).
# Env: BIG (the model), DEV (cuda), BUDGET (seconds for the whole script), LIM1 (items
# at batch 1), SETUP=0 to skip the install (a local dry run).
set -u
# every path below (.whl/, .gpu/, setup.py, tests/) is relative to the repository root
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
T0=$(date +%s)
BUDGET=${BUDGET:-570}
BIG=${BIG:-random:llama-3-8b}
DEV=${DEV:-cuda}
LIM1=${LIM1:-16}
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpuout}
mkdir -p "$OUT"
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
# seconds left before the deadline, at least 1 (`timeout 0` would mean no limit at all)
left() { local l=$(( BUDGET - ( $(date +%s) - T0 ) - 12 )); echo $(( l < 1 ? 1 : l )); }
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

# Our three strategies (object keys spelled as llguidance spells them) on the carried
# schemas, each run with its interleaved unconstrained baseline, CUDA graphs (COMPILE;
# empty: eager), one pass, on MODEL: $1 the folder under $OUT, $2 its seconds at most,
# then the grid's own options (--schedule, --batch, --jump-forward ...).  Its steps.csv
# files are gzipped and the folder packed.
ours_grid() {
  local name=$1 secs=$2; shift 2
  timeout "$(cap "$secs")" $G --engine llguidance xgrammar outlines -o llguidance.spelling=llguidance \
    -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance --model "$MODEL" --device "$DEV" $VOCAB \
    --max-tokens 256 ${COMPILE:+--compile $COMPILE} --unconstrained-baseline --compile-once --compile-timeout 20 \
    --no-compare-kernels --quiet "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  log "$name rc=$?"; tail -40 "$OUT/$name.log"; mv "$OUT/$name.log" "$OUT/$name/" 2>/dev/null
  for f in "$OUT/$name"/*/*/steps.csv; do [ -f "$f" ] && gzip -9 "$f"; done
  pack "$name"
}
