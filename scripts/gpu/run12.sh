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
COMPILE=${COMPILE-reduce-overhead}
ours_grid beside-32 400 --schedule continuous continuous-beside --limit "${LIM:-64}" --batch 32 --jump-forward both
if [ "$(left)" -gt 60 ]; then
  ours_grid beside-8 "$(left)" --schedule continuous continuous-beside --limit "${LIM:-64}" --batch 8 --jump-forward both
fi
log "done"
