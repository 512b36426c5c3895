#!/bin/bash
# The fourth device call (issue 29's GPU run): jump-forward decoding with CUDA graphs on
# random-weight Llama-3-8B that replays each schema's valid instance, every engine, with
# and without jump-forward, at batch 1 and 8.
source "$(dirname "$0")/common.sh"
REPLAY=${REPLAY:-random:llama-3-8b:replay}
SPELL="-o llguidance.spelling=llguidance -o xgrammar.spelling=llguidance -o outlines.spelling=llguidance"

# 0. on this device: a compiled chunk step (dynamic width, CUDA graphs per width) gives
# the eager step's logits, and no width past the first compiles again.
timeout "$(cap 90)" $PY - "$DEV" <<'PYEOF'
import sys, torch
from torch._dynamo.utils import counters
from toolkit.core.vocab import load_vocab
from toolkit.decode.model import load_model
dev, v = sys.argv[1], load_vocab("llama3:.gpu/llama-3/tokenizer.model")
lms = [load_model("random:tiny", v, device=dev, cache="static"),
       load_model("random:tiny", v, device=dev, compile="reduce-overhead")]
decs = [lm.start([[1, 5, 6, 7], [1, 9]], 64, chunks=True) for lm in lms]
worst, graphs = 0.0, []
for d in decs:
    d.forward()
for w in (2, 3, 5, 7, 12, 3, 2):
    got = [d.forward_chunks([[10 + k for k in range(w)], [20]]) for d in decs]
    worst = max(worst, float((got[0] - got[1]).abs().max()))
    graphs.append(counters["stats"]["unique_graphs"])
got = [d.forward(torch.tensor([30, 31], device=dev)) for d in decs]
worst = max(worst, float((got[0] - got[1]).abs().max()))
print(f"chunk check: max |compiled - eager| = {worst:.2e}, graphs after each width {graphs}, notes {lms[1].notes[1:]}")
PYEOF
log "chunk check rc=$?"

# 1. jump-forward, compiled (static cache, CUDA graphs for the one-token and the chunk steps)
log "jump compiled: $(cap 520)s"
timeout "$(cap 520)" $G --engine $ENGINES $SPELL --model "$REPLAY" --device "$DEV" $VOCAB --limit "$LIM1" --batch 1 8 \
  --max-tokens "${MAXTOK:-192}" --jump-forward both --compile reduce-overhead --shared-baseline --compile-once \
  --compile-timeout 20 --no-compare-kernels --out "$OUT/jump-compiled" >"$OUT/jump-compiled.log" 2>&1
log "jump-compiled rc=$?"; tail -25 "$OUT/jump-compiled.log"; mv "$OUT/jump-compiled.log" "$OUT/jump-compiled/" 2>/dev/null
pack jump-compiled
log "done"
