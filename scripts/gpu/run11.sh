#!/bin/bash
# The eleventh device call (issue 47): jump-forward with the chunk widths chosen from the
# measured step costs (--chunk-width auto, the default) on the H200. Our three strategies
# on the 64 schemas, the continuous schedule, batch 32 then 8, each run with its
# interleaved unconstrained baseline, CUDA graphs, one pass; then, with what time is left,
# what a chunk step costs against a one-token step (scripts/gpu/chunk_cost.py). MODEL
# overrides the model (a local dry run: MODEL=sim:10:300:replay DEV=cpu SETUP=0
# COMPILE= CCMODEL=random:tiny).
source "$(dirname "$0")/common.sh"
MODEL=${MODEL:-random:llama-3-8b:replay}
COMPILE=${COMPILE-reduce-overhead}
ours_grid auto-32 250 --schedule continuous --limit "${LIM:-64}" --batch 32 --jump-forward both
ours_grid auto-8 250 --schedule continuous --limit "${LIM:-64}" --batch 8 --jump-forward both
if [ "$(left)" -gt 40 ]; then
  log "chunk-cost: $(cap 200)s"
  timeout "$(cap 200)" $PY scripts/gpu/chunk_cost.py --model "${CCMODEL:-random:llama-3-8b}" --device "$DEV" \
    --compile "${COMPILE:-none}" --vocab llama3:.gpu/llama-3/tokenizer.model --batch 32 8 --widths 2 4 8 16 \
    --graphs dynamic static --out "$OUT/chunk_cost.csv" 2>&1 | tail -30
  log "chunk-cost rc=$?"
fi
log "done"
