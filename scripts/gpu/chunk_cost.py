"""What a jump-forward chunk step costs on the device against a one-token step (issue 47).

On an H200 (``results/gpu/lookahead/``) chunk steps of 2 to 16 tokens took 3-6 % longer
than one-token steps at batch 8 and 9-17 % longer at batch 32, flat in the width.  A
cost flat from 64 to 512 tokens a step is not arithmetic; one guess is the chunk graph,
compiled with its width dynamic, against the one-token step's static one.  This times,
per batch size, a one-token step and chunk steps of each width, with the chunk step
compiled as ``masklab generate`` compiles it (``dynamic``: the width left dynamic) and,
if asked, with one static graph per width (``static``), and writes a CSV row per
(graphs, batch, width): the median and p90 milliseconds over ``--steps`` synchronized
steps, after two untimed ones.

    python scripts/gpu/chunk_cost.py --vocab llama3:.gpu/llama-3/tokenizer.model \\
        --batch 8 32 --widths 2 4 8 16 --graphs dynamic static --out /tmp/chunk_cost.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="random:llama-3-8b")
    p.add_argument("--vocab", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", default="reduce-overhead", help="a torch.compile mode, or none (eager)")
    p.add_argument("--batch", type=int, nargs="+", default=[8, 32])
    p.add_argument("--widths", type=int, nargs="+", default=[2, 4, 8, 16])
    p.add_argument("--graphs", nargs="+", choices=("dynamic", "static"), default=["dynamic"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default="-")
    args = p.parse_args()
    if args.steps < 1 or min(args.batch) < 1 or min(args.widths) < 2:
        p.error("--steps and --batch must be >= 1 and each of --widths >= 2 (width 1 is always timed)")
    if max(args.widths) * (args.steps + 2) > 256:
        p.error("--steps and --widths must fit the 256 positions each measurement's cache has")

    import torch
    import torch._dynamo as dynamo

    from toolkit.core.vocab import load_vocab
    from toolkit.decode.model import load_model

    vocab = load_vocab(args.vocab)
    rows = []
    mark = dynamo.mark_dynamic
    for graphs in args.graphs:
        mode = None if args.compile == "none" else args.compile
        lm = load_model(args.model, vocab, device=args.device, compile=mode, cache="static")
        if graphs == "static" and mode is not None:  # one graph per width: no dimension left dynamic
            lm._compiled_chunks = torch.compile(lm.model.forward, mode=mode, dynamic=False, fullgraph=True)
            dynamo.mark_dynamic = lambda *a, **k: None
        try:
            for batch in args.batch:
                for width in [1, *args.widths]:
                    dec = lm.start([[1, 2, 3]] * batch, 256, chunks=True)
                    dec.forward()
                    times = []
                    for k in range(args.steps + 2):
                        lm.synchronize()
                        t0 = time.perf_counter()
                        if width == 1:
                            dec.forward(torch.full((batch,), 5, dtype=torch.long, device=lm.device))
                        else:
                            dec.forward_chunks([[5] * width] * batch)
                        lm.synchronize()
                        if k >= 2:
                            times.append(1e3 * (time.perf_counter() - t0))
                    times.sort()
                    row = {"graphs": graphs, "batch": batch, "width": width,
                           "ms_p50": round(statistics.median(times), 3),
                           "ms_p90": round(times[math.ceil(0.9 * len(times)) - 1], 3)}  # (nearest rank)
                    rows.append(row)
                    print(row, flush=True)
        finally:
            dynamo.mark_dynamic = mark
    out = sys.stdout if args.out == "-" else open(args.out, "w", newline="", encoding="utf-8")  # noqa: SIM115
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
