#!/bin/bash
# The twelfth device call (issue 47): where a continuous batch's refills put their prompt
# passes. Our three strategies on the 64 schemas at batch 32, jump-forward off and on
# (lookahead, --chunk-width auto), each under `continuous` (the prompt pass runs and is
# waited for before the step's draw: 28-38 ms of eager launches per refill on the H200,
# ../../results/gpu/serving/) and `continuous-beside` (launched after the step's forward
# pass, beside it), each run with its interleaved unconstrained baseline, CUDA graphs,
# one pass; then batch 8 with what time is left. The first call after the replay fix
# (b3b17b6), so it also measures that. MODEL overrides the model (a local dry run:
# MODEL=sim:10:300:replay DEV=cpu SETUP=0 COMPILE=).
source "$(dirname "$0")/common.sh"
MODEL=${MODEL:-random:llama-3-8b:replay}
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"
COMPILE=${COMPILE-reduce-overhead}
grid() {  # $1: the folder, $2: seconds at most, then the grid's options
  local name=$1 secs=$2; shift 2
  timeout "$(cap "$secs")" $G --engine llguidance xgrammar outlines $SPELL --model "$MODEL" --device "$DEV" $VOCAB \
    --max-tokens 256 --schedule continuous continuous-beside ${COMPILE:+--compile $COMPILE} \
    --unconstrained-baseline --compile-once --compile-timeout 20 --no-compare-kernels --quiet \
    "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  log "$name rc=$?"; tail -40 "$OUT/$name.log"; mv "$OUT/$name.log" "$OUT/$name/" 2>/dev/null
  for f in "$OUT/$name"/*/*/steps.csv; do [ -f "$f" ] && gzip -9 "$f"; done
  pack "$name"
}
grid beside-32 400 --limit "${LIM:-64}" --batch 32 --jump-forward both
if [ "$(left)" -gt 60 ]; then
  grid beside-8 "$(left)" --limit "${LIM:-64}" --batch 8 --jump-forward both
fi
log "done"
