#!/bin/bash
# The tenth device call (issue 47), for the next session lent a GPU, sized for one call:
# (1) what a chunk step costs against a one-token step, per width, with the chunk graph
# compiled as generate compiles it (width dynamic) and with a static graph per width
# (scripts/gpu/chunk_cost.py); (2) jump-forward with the chunk widths chosen from the
# measured step costs (--chunk-width auto, the default) against whole runs
# (--chunk-width all) and plain decoding: our three strategies on the 64 schemas, batch
# 32 then 8, the continuous schedule, each run with its interleaved unconstrained
# baseline, CUDA graphs, one pass.
source "$(dirname "$0")/common.sh"
REPLAY=random:llama-3-8b:replay
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"
log "chunk-cost: $(cap 200)s"
timeout "$(cap 200)" $PY scripts/gpu/chunk_cost.py --vocab llama3:.gpu/llama-3/tokenizer.model --batch 32 8 \
  --widths 2 4 8 16 --graphs dynamic static --out "$OUT/chunk_cost.csv" 2>&1 | tail -30
log "chunk-cost rc=$?"
grid() {  # $1: the folder, $2: seconds at most, then the grid's options
  local name=$1 secs=$2; shift 2
  timeout "$(cap "$secs")" $G --engine llguidance xgrammar outlines $SPELL --model "$REPLAY" --device "$DEV" $VOCAB \
    --max-tokens 256 --schedule continuous --compile reduce-overhead \
    --unconstrained-baseline --compile-once --compile-timeout 20 --no-compare-kernels --quiet \
    "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  log "$name rc=$?"; tail -40 "$OUT/$name.log"; mv "$OUT/$name.log" "$OUT/$name/" 2>/dev/null
  for f in "$OUT/$name"/*/*/steps.csv; do [ -f "$f" ] && gzip -9 "$f"; done
  pack "$name"
}
grid auto-32 200 --limit 64 --batch 32 --jump-forward both
grid whole-32 90 --limit 64 --batch 32 --jump-forward lookahead --chunk-width all
grid auto-8 200 --limit 64 --batch 8 --jump-forward both
log "done"
