#!/bin/bash
# The owed GPU runs (issues 7 and 24): the first device call. Phases end by a deadline
# so whatever finished comes back: each phase is tarred into $OUT as soon as it ends.
source "$(dirname "$0")/common.sh"

# 0. the CUDA apply-kernel test, then the pipelined loop's CUDA path on a tiny model:
# greedy, pipelined and serial must give the same tokens.
if [ "$DEV" = cuda ]; then
  timeout "$(cap 60)" $PY -m pytest -q -p no:cacheprovider tests/test_bitmask.py -k "cuda or apply" 2>&1 | tail -3
fi
mkdir -p "$OUT/smoke"
for loop in pipelined serial; do
  timeout "$(cap 90)" $G --engine llguidance peer:xgrammar --model random:tiny --device "$DEV" $VOCAB --limit 4 \
    --batch 1 4 --max-tokens 16 --loop $loop --no-compare-kernels --out "$OUT/smoke/$loop" >"$OUT/smoke/$loop.log" 2>&1
  log "smoke $loop rc=$?"; tail -3 "$OUT/smoke/$loop.log"
done
$PY - "$OUT/smoke" <<'EOF'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
def toks(loop):
    out = {}
    for f in sorted((root / loop).glob("*/batch-*/sequences.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            out[(f.parent.parent.name, f.parent.name, r["item"], r["batch_index"], r["slot"])] = (r["text"], r["status"])
    return out
a, b = toks("pipelined"), toks("serial")
same = sum(a[k] == b.get(k) for k in a)
print(f"smoke: {len(a)} sequences pipelined, {len(b)} serial, {same} token-identical")
EOF
pack smoke

# 1. issue 7: eager bf16, 64 schemas, batch 8 and 32 (batch 1 in phase 3, on fewer items).
log "eager 8/32: $(cap 190)s"
timeout "$(cap 190)" $G --engine $ENGINES --model "$BIG" --device "$DEV" $VOCAB --batch 8 32 --max-tokens 64 \
  --temperature 1 --shared-baseline --compile-once --compile-timeout 20 --out "$OUT/eager" >"$OUT/eager.log" 2>&1
log "eager rc=$?"; tail -25 "$OUT/eager.log"; mv "$OUT/eager.log" "$OUT/eager/" 2>/dev/null; pack eager

# 2. issue 24: the serving engine's step, torch.compile reduce-overhead (CUDA graphs).
log "compiled: $(cap 200)s"
timeout "$(cap 200)" $G --engine $ENGINES --model "$BIG" --device "$DEV" $VOCAB --limit "$LIM1" --batch 1 8 \
  --max-tokens 64 --temperature 1 --compile reduce-overhead --shared-baseline --compile-once --compile-timeout 20 \
  --out "$OUT/compiled" >"$OUT/compiled.log" 2>&1
log "compiled rc=$?"; tail -25 "$OUT/compiled.log"; mv "$OUT/compiled.log" "$OUT/compiled/" 2>/dev/null; pack compiled

# 3. eager batch 1 on LIM1 items, with what is left.
log "eager batch 1: $(left)s"
timeout "$(left)" $G --engine $ENGINES --model "$BIG" --device "$DEV" $VOCAB --limit "$LIM1" --batch 1 --max-tokens 64 \
  --temperature 1 --shared-baseline --compile-once --compile-timeout 20 --out "$OUT/eager1" >"$OUT/eager1.log" 2>&1
log "eager1 rc=$?"; tail -25 "$OUT/eager1.log"; mv "$OUT/eager1.log" "$OUT/eager1/" 2>/dev/null; pack eager1
log "done"
