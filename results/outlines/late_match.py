"""Classify every mask difference between ``outlines`` and ``peer:outlines-core`` in a run.

Usage: python results/outlines/late_match.py RUN   (after ``masklab agree RUN --engines
outlines,peer:outlines-core``).  For each item whose masks differ, both engines are
re-run on its valid instances; at each differing step, every token only one engine
allows is checked against outlines-core's documented miss (tests/test_peers.py,
``test_outlines_core_differs_tokens_leaving_an_accepting_state``): the token's bytes
but the last reach an accepting state of the regex's DFA, and the whole token ends in
a non-accepting one.  Prints the counts; any token not explained is listed.
"""

import json
import sys
from pathlib import Path

from strategies import get_engine
from toolkit.core import bitmask as bm
from toolkit.bench.agree import agreement
from toolkit.bench.datasets import iter_items
from toolkit.core.vocab import load_vocab

run = Path(sys.argv[1])
meta = json.loads((run / "run.json").read_text())
table = agreement(run, "outlines", "peer:outlines-core")
bad = set(table[table["differ"] > 0]["item"])
vocab = load_vocab(meta["vocab"]["spec"])
ours = get_engine("outlines", vocab, **meta["engines"]["outlines"]["requested_options"])
peer = get_engine("peer:outlines-core", vocab)
steps = explained = unexplained = only_peer = 0
for item in iter_items(meta["data"]):
    if item.name not in bad:
        continue
    a, b = ours.compile(item.spec), peer.compile(item.spec)
    dfa = a.dfa
    ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
    for case in (c for c in item.cases if c.valid):
        tokens = vocab.encode(case.text) + [vocab.eos_ids[0]]
        ma, mb = ours.matcher(a), peer.matcher(b)
        for t in tokens:
            ma.fill_bitmask(ra)
            mb.fill_bitmask(rb)
            if (ra != rb).any():
                steps += 1
                only_peer += len(bm.allowed_ids(rb[0] & ~ra[0], vocab.size))
                for i in bm.allowed_ids(ra[0] & ~rb[0], vocab.size).tolist():
                    data = vocab.token_bytes[i]
                    mid, end = dfa.run(data[:-1], ma.state), dfa.run(data, ma.state)
                    if mid and dfa.accepting[mid] and end and not dfa.accepting[end]:
                        explained += 1
                    else:
                        unexplained += 1
                        print("unexplained:", item.name, repr(data))
            if not (ma.accept_token(t) and mb.accept_token(t)):
                break
print(json.dumps({"items": len(bad), "differing_steps": steps, "tokens_only_outlines_late_match": explained,
                  "tokens_only_outlines_unexplained": unexplained, "tokens_only_outlines_core": only_peer}))
