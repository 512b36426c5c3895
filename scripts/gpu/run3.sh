#!/bin/bash
# The third device call (issue 24's gaps): the serving step (CUDA graphs) at batch 32
# and 64, and eager batch 1 for every engine, on what time is left.
source "$(dirname "$0")/common.sh"

# 1. torch.compile reduce-overhead at batch 32 and 64 (64 schemas: two groups and one).
log "compiled 32/64: $(cap 330)s"
timeout "$(cap 330)" $G --engine $ENGINES --model "$BIG" --device "$DEV" $VOCAB --limit 64 --batch 32 64 \
  --max-tokens 64 --temperature 1 --compile reduce-overhead --shared-baseline --compile-once --compile-timeout 20 \
  --out "$OUT/compiled-big" >"$OUT/compiled-big.log" 2>&1
log "compiled-big rc=$?"; tail -25 "$OUT/compiled-big.log"; mv "$OUT/compiled-big.log" "$OUT/compiled-big/" 2>/dev/null
pack compiled-big

# 2. eager batch 1, every engine, on LIM1 items, with what is left.
log "eager batch 1: $(left)s"
timeout "$(left)" $G --engine $ENGINES --model "$BIG" --device "$DEV" $VOCAB --limit "$LIM1" --batch 1 --max-tokens 64 \
  --temperature 1 --shared-baseline --compile-once --compile-timeout 20 --out "$OUT/eager1-all" >"$OUT/eager1-all.log" 2>&1
log "eager1-all rc=$?"; tail -25 "$OUT/eager1-all.log"; mv "$OUT/eager1-all.log" "$OUT/eager1-all/" 2>/dev/null
pack eager1-all
log "done"
