#!/bin/bash
# The sixth device call (issue 47): the serving loop's schedules on a GPU. Our three
# strategies on the 64 schemas at batch 8 and 32, static and continuous schedules,
# jump-forward off and on, each run with its interleaved unconstrained baseline (the
# same items, the same schedule), CUDA graphs; where continuous batching with CUDA
# graphs fails before its first run, again with the static cache, eager.
source "$(dirname "$0")/common.sh"
REPLAY=random:llama-3-8b:replay
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"
serve() {  # $1: the forward-pass options
  timeout "$(cap 560)" $G --engine llguidance xgrammar outlines $SPELL --model "$REPLAY" --device "$DEV" $VOCAB \
    --limit 64 --batch 8 32 --max-tokens 256 --schedule static continuous --jump-forward both $1 \
    --unconstrained-baseline --compile-once --compile-timeout 20 --no-compare-kernels --quiet \
    --out "$OUT/serving" >>"$OUT/serving.log" 2>&1
}
log "serving, CUDA graphs: $(cap 560)s"
serve "--compile reduce-overhead"; rc=$?
log "serving rc=$rc"
if [ "$rc" != 0 ] && [ ! -f "$OUT/serving/summary.csv" ]; then
  tail -25 "$OUT/serving.log"; log "again eager, static cache: $(cap 560)s"
  serve "--cache static"; log "serving (eager) rc=$?"
fi
tail -40 "$OUT/serving.log"; mv "$OUT/serving.log" "$OUT/serving/" 2>/dev/null
for f in "$OUT"/serving/*/*/steps.csv; do gzip -9 "$f"; done
pack serving
log "done"
