"""Which valid instances the ``llguidance`` strategy rejects, and whether the grammar does too.

Usage: python results/llguidance/grammar_rejects.py RUN [SECONDS]

For every item the strategy fails with ``validation_error``, each valid instance it
rejected is given to the scannerless recognizer of the very same grammar,
``Grammar.from_json_schema(schema).accepts(text)`` (the language ``naive`` implements),
with a time limit per instance (default 30 s).  An instance the grammar rejects too is
lost by the schema compiler, not by the strategy; one the grammar accepts is a
strategy (lexing) difference and is listed.  Prints the counts.
"""

import json
import re
import signal
import sys
from pathlib import Path

from toolkit.bench.datasets import iter_items
from toolkit.bench.harness import read_records

run = Path(sys.argv[1])
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 30
meta = json.loads((run / "run.json").read_text())
failed = {r["item"]: r for r in read_records(run) if r["engine"] == "llguidance" and r["status"] == "validation_error"}


class _Slow(Exception):
    pass


def _alarm(*_):
    raise _Slow


signal.signal(signal.SIGALRM, _alarm)
counts = {"grammar rejects too": 0, "grammar accepts": 0, "undecided (time limit)": 0}
for item in iter_items(meta["data"]):
    rec = failed.get(item.name)
    if rec is None:
        continue
    rejected = {int(k) for k in re.findall(r"case (\d+) \(valid\) rejected", rec["detail"])}
    grammar = item.grammar()
    for k in sorted(rejected):
        signal.alarm(limit)
        try:
            verdict = "grammar accepts" if grammar.accepts(item.cases[k].text) else "grammar rejects too"
        except _Slow:
            verdict = "undecided (time limit)"
        finally:
            signal.alarm(0)
        counts[verdict] += 1
        if verdict != "grammar rejects too":
            print(f"{item.name} case {k}: {verdict}")
print(f"{len(failed)} items with validation errors; rejected valid instances: {counts}")
