"""The adapter's cost per step (issue 30): ``model.generate`` of ``random:llama-3.2-1b``
on the CPU, greedy, with :class:`toolkit.adapters.transformers.MaskLogitsProcessor`
against the same call without it, at batch 1 and 8, for every engine.

    MASKLAB_SHARED=../shared python scripts/adapter-cpu/run.py [--steps 32] [--repeats 3]

Per engine and batch: the schemas of ``datasets/schemas`` (the first 8), as many
``generate`` calls with the processor as without it, interleaved (unconstrained,
constrained, unconstrained, ...) so that the machine's drift falls on both.  A step's
time is the call's wall time over the steps it ran (a constrained batch stops when
every sequence has ended); the processor's own time is measured around its calls.
Writes ``results/adapter-cpu/adapter.csv`` (``--out``) and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported in main(), after the arguments: --help needs neither torch nor a model
    import torch

    from toolkit.adapters.transformers import MaskLogitsProcessor

ROOT = Path(__file__).resolve().parents[2]  # the repository
ENGINES = ("llguidance", "xgrammar", "outlines", "peer:llguidance", "peer:xgrammar")


class Timed:
    """A logits processor that times another one."""

    def __init__(self, inner: MaskLogitsProcessor) -> None:
        self.inner, self.seconds, self.calls = inner, 0.0, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = self.inner(input_ids, scores)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def _generate(lm, ids, steps: int, proc=None) -> tuple[float, int]:
    import torch

    t0 = time.perf_counter()
    out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                            max_new_tokens=steps, logits_processor=[proc] if proc else None,
                            pad_token_id=0, eos_token_id=proc.inner.vocab.eos_ids if proc else None)
    return time.perf_counter() - t0, int(out.shape[1] - ids.shape[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", nargs="+", default=list(ENGINES))
    ap.add_argument("--out", default=str(ROOT / "results" / "adapter-cpu" / "adapter.csv"))
    args = ap.parse_args()

    import torch

    from toolkit.adapters.transformers import MaskLogitsProcessor
    from toolkit.core.vocab import load_vocab
    from toolkit.data.datasets import embedded_dir, iter_items, shared_dir
    from toolkit.decode.model import load_model

    torch.set_num_threads(max(1, torch.get_num_threads()))
    vocab = load_vocab("llama3:" + str(shared_dir() / "tokenizers/llama-3/tokenizer.model"))
    lm = load_model("random:llama-3.2-1b", vocab, seed=0)
    schemas = [i for i in iter_items(embedded_dir() / "schemas") if i.kind == "schema"][:8]
    prompt = [lm.bos_id or 0, *vocab.encode("Answer in JSON:")]
    rows = []
    with torch.inference_mode():
        _generate(lm, torch.tensor([prompt]), 4)  # warm-up
        for batch in (1, 8):
            ids = torch.tensor([prompt] * batch)
            for name in args.engines:
                plain_s = plain_n = cons_s = cons_n = proc_s = calls = 0.0
                groups = [schemas[:1], schemas[1:2], schemas[2:3]] if batch == 1 else [schemas]
                for _ in range(args.repeats):
                    for group in groups:
                        s, n = _generate(lm, ids, args.steps)
                        plain_s, plain_n = plain_s + s, plain_n + n
                        # one schema per batch (the processor compiles one grammar)
                        proc = Timed(MaskLogitsProcessor(name, vocab, schema=group[0].spec))
                        s, n = _generate(lm, ids, args.steps, proc)
                        cons_s, cons_n = cons_s + s, cons_n + n
                        proc_s, calls = proc_s + proc.seconds, calls + proc.calls
                row = {"engine": name, "batch": batch, "steps": int(cons_n),
                       "unconstrained_step_ms": 1e3 * plain_s / plain_n, "constrained_step_ms": 1e3 * cons_s / cons_n,
                       "processor_ms": 1e3 * proc_s / calls}
                row["overhead_ms"] = row["constrained_step_ms"] - row["unconstrained_step_ms"]
                row["overhead_pct"] = 100 * row["overhead_ms"] / row["unconstrained_step_ms"]
                rows.append(row)
                print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows)


if __name__ == "__main__":
    main()
