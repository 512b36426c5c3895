#!/bin/bash
# The eighth device call (issue 47), prepared for the next session lent a GPU: the
# jump-forward rerun with its three schedules (lookahead, overlap, inline). Our three
# strategies on the 64 schemas, the continuous schedule, batch 8 and 32, jump-forward off
# and each schedule, each run with its interleaved unconstrained baseline, CUDA graphs,
# three passes (--repeat: the report's medians and spreads); then batch 1 on LIM1 items,
# one pass, with what time is left.
source "$(dirname "$0")/common.sh"
REPLAY=random:llama-3-8b:replay
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"
jump() {  # $1: the folder, then the grid's options
  local name=$1; shift
  timeout "$(cap 400)" $G --engine llguidance xgrammar outlines $SPELL --model "$REPLAY" --device "$DEV" $VOCAB \
    --max-tokens 256 --schedule continuous --jump-forward all --compile reduce-overhead \
    --unconstrained-baseline --compile-once --compile-timeout 20 --no-compare-kernels --quiet \
    "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  log "$name rc=$?"; tail -30 "$OUT/$name.log"; mv "$OUT/$name.log" "$OUT/$name/" 2>/dev/null
  for f in "$OUT/$name"/*/*/steps.csv "$OUT/$name"/*/*/*/steps.csv; do [ -f "$f" ] && gzip -9 "$f"; done
  pack "$name"
}
log "jump-8-32: $(cap 400)s"
jump jump-8-32 --limit 64 --batch 8 32 --repeat 3
log "jump-1: $(cap 400)s"
jump jump-1 --limit "$LIM1" --batch 1
log "done"
