"""The scan two BPE tests share: every code point the scanner classes, in chunks, each
written into a text around letters, spaces, digits and apostrophes, tokenized by the C
tokenizer and by the vocabulary's own encoder."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolkit.core.bpe import BpeTable
from toolkit.core.vocab import Vocabulary


def mismatched_chunks(bpe: BpeTable, vocab: Vocabulary, cps: Sequence[int],
                      text_of: Callable[[str], str]) -> list[str]:
    """The chunks of four code points of ``cps`` whose text (``text_of(chunk)``) the C
    tokenizer (``bpe``) cuts otherwise than ``vocab.encode``."""
    bad = []
    for i in range(0, len(cps), 4):
        chunk = "".join(map(chr, cps[i:i + 4]))
        text = text_of(chunk)
        if bpe.tokens(text.encode("utf-8")) != vocab.encode(text):
            bad.append(chunk)
    return bad
