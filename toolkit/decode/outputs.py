"""What a decoding run records of each sequence: its output's verdict and its row.

Every finished output is checked (:func:`toolkit.data.checks.check_output`, the judge
the audit shares): a schema item's output must parse as JSON and validate
(``jsonschema``), a grammar or regex item's must be in the grammar's language
(:meth:`Grammar.accepts`).  Outputs cut by ``max_tokens`` are ``unfinished`` and are
checked as prefixes: ``prefix_ok`` says whether the item's masklab grammar (as the
engine read it, with its options: a schema's ``spelling``) can still complete them (:func:`toolkit.data.checks.check_prefix`; None when the item has no
grammar masklab can build).  When the engine's masks follow that grammar
(``grammar: "masklab"``: every non-schema item, and schemas for engines whose
``schema_grammar`` is ``"masklab"``) a False is a wrong mask, counted in
``bad_prefix``; when they follow the engine's own schema compiler (the peers) a False
only says the output left masklab's grammar, which is tighter than the schema by
design (:mod:`toolkit.jsonschema`), and is counted in ``outside_grammar``.  An output
that finished but fails its check is ``invalid`` (a wrong mask: the worst bug this
project can have); one whose schema ``jsonschema`` cannot check is ``unchecked``,
never counted valid.
"""

from __future__ import annotations

from typing import Any

from toolkit.core.errors import MasklabError
from toolkit.core.vocab import Vocabulary
from toolkit.data.checks import check_output, check_prefix, item_grammar
from toolkit.decode.loop import Seq
from toolkit.grammar.inputs import is_native
from toolkit.grammar.special import marked_bytes, spelled

__all__ = ["sequence_row"]


def sequence_row(engine: Any, vocab: Vocabulary, s: Seq, batch_index: int, slot: int, prompt_tokens: int,
                 grammars: dict[str, Any]) -> dict[str, Any]:
    """The row of ``s`` (slot ``slot`` of batch ``batch_index``, decoded by ``engine``
    after a prompt of ``prompt_tokens``): its status after the checks (see the module
    doc), why, which grammar its masks follow, its tokens, TTFM and text.  ``grammars``
    keeps the items' grammars across calls."""
    ids = [t for t in s.tokens if t not in vocab.eos_ids]
    data = marked_bytes(vocab, ids, item_grammar(s.item, grammars, vocab) if s.item.kind != "schema" else None)
    status, why = s.status, s.error
    if status == "finished":
        ok, why = check_output(s.item, data, vocab)
        status = "unchecked" if ok is None else "valid" if ok else "invalid"
    elif s.matcher is not None and s.matcher.error:
        why = s.matcher.error
    prefix_ok = _prefix_ok(engine, s.item, data, grammars, vocab) if status == "unfinished" else None
    # the engine reads the item with its own front end, and for a schema not through masklab's grammar
    own = is_native(engine, s.item.source()) and (s.item.kind != "schema" or engine.schema_grammar != "masklab")
    return {"batch_index": batch_index, "slot": slot, "item": s.item.name, "kind": s.item.kind,
            "status": status, "detail": why, "grammar": "own" if own else "masklab",
            "prefix_ok": prefix_ok, "prompt_tokens": prompt_tokens,
            "tokens": len(s.tokens), "forced": s.forced, "jumped": s.jumped, "held": s.held,
            "ttfm_s": s.ttfm_s if s.matcher is not None else None,
            "compile_reused": s.reused,
            "text": spelled(vocab, ids).decode("utf-8", errors="replace")[:2000]}


def _prefix_ok(engine: Any, item: Any, data: bytes, grammars: dict[Any, Any], vocab: Vocabulary) -> bool | None:
    """:func:`~toolkit.data.checks.check_prefix` against the grammar the engine read the
    item with, where it says (``grammar_for``: masklab's strategies, with their options,
    e.g. a schema's ``spelling``); the item's default grammar otherwise."""
    reader = getattr(engine, "grammar_for", None)
    if reader is None:
        return check_prefix(item, data, grammars, vocab)
    key = (id(engine), item.name)
    if key not in grammars:
        try:
            grammars[key] = reader(item.source())[0].bind(vocab)
        except MasklabError:
            grammars[key] = None
    grammar = grammars[key]
    return None if grammar is None else grammar.accepts_prefix(data)
