#!/bin/bash
# The fifth device call (issue 47): the owed jump-forward rerun after the replay fix, as run4.sh but on 8 items with --repeat 2.
source "$(dirname "$0")/common.sh"
REPLAY=random:llama-3-8b:replay
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"
log "jump compiled: $(cap 470)s"
timeout "$(cap 470)" $G --engine $ENGINES $SPELL --model "$REPLAY" --device "$DEV" $VOCAB --limit 8 --batch 1 8 \
  --max-tokens 192 --jump-forward both --compile reduce-overhead --shared-baseline --compile-once --repeat 2 \
  --compile-timeout 20 --no-compare-kernels --out "$OUT/jump-rerun" >"$OUT/jump-rerun.log" 2>&1
log "jump-rerun rc=$?"; tail -40 "$OUT/jump-rerun.log"; mv "$OUT/jump-rerun.log" "$OUT/jump-rerun/" 2>/dev/null
pack jump-rerun
log "done"
