#!/bin/bash
# The ninth device call (issue 47), sized for one call of a session's 15 minutes: the
# lookahead schedule against plain and unconstrained decoding on the GPU. Our three
# strategies on the 64 schemas, batch 8, the continuous schedule, jump-forward off and
# lookahead (`--jump-forward both`), each run with its interleaved unconstrained
# baseline, CUDA graphs, one pass (cut by the time limit: the summary is written after
# each run, so what ran comes back); then batch 32 with what time is left.
source "$(dirname "$0")/common.sh"
REPLAY=random:llama-3-8b:replay
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"
grid() {  # $1: the folder, $2: seconds at most, then the grid's options
  local name=$1 secs=$2; shift 2
  timeout "$(cap "$secs")" $G --engine llguidance xgrammar outlines $SPELL --model "$REPLAY" --device "$DEV" $VOCAB \
    --max-tokens 256 --schedule continuous --jump-forward both --compile reduce-overhead \
    --unconstrained-baseline --compile-once --compile-timeout 20 --no-compare-kernels --quiet \
    "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  log "$name rc=$?"; tail -40 "$OUT/$name.log"; mv "$OUT/$name.log" "$OUT/$name/" 2>/dev/null
  for f in "$OUT/$name"/*/*/steps.csv; do [ -f "$f" ] && gzip -9 "$f"; done
  pack "$name"
}
log "lookahead-8: $(cap 330)s"
grid lookahead-8 330 --limit 64 --batch 8
log "lookahead-32: $(cap 300)s"
grid lookahead-32 300 --limit 64 --batch 32
log "done"
