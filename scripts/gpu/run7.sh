#!/bin/bash
# The seventh device call (issue 47), what was left of the session's device time: after
# run6.sh showed a jump run's one-token steps 22 % slower (its static cache 4x longer)
# and the replay's host work in every step, llguidance alone at batch 8 and 32, the
# continuous schedule, jump-forward off and on, with those two fixed.
source "$(dirname "$0")/common.sh"
REPLAY=random:llama-3-8b:replay
log "serving-fixed: $(cap 400)s"
timeout "$(cap 400)" $G --engine llguidance -o llguidance.spelling=llguidance --model "$REPLAY" --device "$DEV" $VOCAB \
  --limit 64 --batch 8 32 --max-tokens 256 --schedule continuous --jump-forward both --compile reduce-overhead \
  --unconstrained-baseline --compile-timeout 20 --no-compare-kernels --quiet \
  --out "$OUT/serving-fixed" >"$OUT/serving-fixed.log" 2>&1
log "serving-fixed rc=$?"; tail -12 "$OUT/serving-fixed.log"; mv "$OUT/serving-fixed.log" "$OUT/serving-fixed/" 2>/dev/null
for f in "$OUT"/serving-fixed/*/*/steps.csv; do gzip -9 "$f"; done
pack serving-fixed
log "done"
