"""Is an output what its item asks for?  The judges the decoding harness and the audit
share.

* :func:`schema_verdict`: what ``jsonschema`` says of a JSON value against a validator
  (the first error it ranks best, with its JSON pointer), the one judgement of a value
  against a schema: the audit's judge (:mod:`toolkit.bench.audit`, with the validator of
  the schema's own draft and format checks) and :func:`check_output` (with
  ``jsonschema.validate``'s validator) both go through it;
* :func:`check_output`: a finished output against its item: a schema item's must parse
  as JSON and validate, a grammar or regex item's must be in the grammar's language
  (:meth:`~toolkit.grammar.Grammar.accepts`);
* :func:`check_prefix`: whether the item's grammar can still complete an unfinished
  output (:meth:`~toolkit.grammar.Grammar.accepts_prefix`), the grammars kept by
  :func:`item_grammar`.

``jsonschema`` is imported inside the functions that use it (the import costs nothing
until a schema is checked).
"""

from __future__ import annotations

import json
from typing import Any

from toolkit.core.errors import MasklabError
from toolkit.core.vocab import Vocabulary
from toolkit.data.datasets import Item
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import schema_value

__all__ = ["schema_verdict", "check_output", "check_prefix", "item_grammar"]


def schema_verdict(validator: Any, value: Any) -> tuple[str, str] | None:
    """None when ``validator`` (a ``jsonschema`` validator) accepts ``value``, else the
    message and the JSON pointer (``""`` at the top) of the error ``jsonschema`` ranks
    first (:func:`jsonschema.exceptions.best_match`, as ``jsonschema.validate`` raises it)."""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    pointer = "/" + "/".join(str(p) for p in error.absolute_path) if error.absolute_path else ""
    return error.message, pointer


def check_output(item: Item, data: bytes | str, vocab: Vocabulary | None = None) -> tuple[bool | None, str]:
    """``(ok, why)``: does a finished output (its bytes, special tokens as their marks:
    :func:`toolkit.grammar.special.marked_bytes`) satisfy its item (see the module doc)?  ``ok``
    is None when it cannot be checked (a schema ``jsonschema`` refuses).  ``vocab``
    resolves the special tokens a grammar names (unbound, any special token would do)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if item.kind == "schema":
        try:
            value = json.loads(raw)
        except ValueError as e:  # UnicodeDecodeError included
            return False, f"not JSON: {e}"
        import jsonschema

        schema = schema_value(item.spec)
        cls = jsonschema.validators.validator_for(schema)  # what jsonschema.validate checks with
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as e:
            return None, f"jsonschema cannot check this schema: {e.message}"
        verdict = schema_verdict(cls(schema), value)
        if verdict is not None:
            return False, f"schema: {verdict[0]}"
        return True, ""
    grammar = item.grammar()
    ok = (grammar if vocab is None else grammar.bind(vocab)).accepts(raw)
    return ok, "" if ok else "not in the grammar's language"


def item_grammar(item: Item, cache: dict[str, Any], vocab: Vocabulary | None = None) -> Grammar | None:
    """The item's grammar (bound to ``vocab`` when given), kept in ``cache`` by item name;
    None when masklab cannot build it (e.g. a schema keyword it does not support)."""
    if item.name not in cache:
        try:
            grammar = item.grammar()
            cache[item.name] = grammar if vocab is None else grammar.bind(vocab)
        except MasklabError:
            cache[item.name] = None
    return cache[item.name]


def check_prefix(item: Item, data: bytes, cache: dict[str, Any] | None = None,
                 vocab: Vocabulary | None = None) -> bool | None:
    """Can the item's grammar still complete ``data`` (an unfinished output; special
    tokens as in :func:`check_output`)?  None when masklab cannot build the item's grammar
    (e.g. a schema keyword it does not support).  ``cache`` keeps the grammars by item
    name across calls."""
    grammar = item_grammar(item, {} if cache is None else cache, vocab)
    return None if grammar is None else grammar.accepts_prefix(data)
