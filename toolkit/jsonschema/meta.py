"""A JSON schema looked at without compiling it.

* :func:`meta_schema_problem`: whether the schema is one by the meta-schema of its own
  draft (``$schema``, else the latest), and if not, ``jsonschema``'s message and the
  JSON pointer of the offending part (:class:`SchemaProblem`).  ``masklab bench``,
  ``audit`` and ``schema-coverage`` refuse such an item when they load it
  (:func:`toolkit.data.datasets.usable_items`), and the audit's validator
  (:func:`schema_validator`) is built after the same check: one function for both.
* :func:`keyword_pointers`: where given keywords sit in a schema (only where a schema
  is, not inside ``properties`` names, ``enum`` or ``const`` values).
* :func:`keywords_named`: the JSON Schema keywords a message names (a peer's compile
  warning such as xgrammar's ``"... ; ignoring minLength/maxLength"``), for the
  unenforced-keyword report of the peers (:mod:`strategies.peers`).

``jsonschema`` is imported inside the functions that use it (it is a dependency of the
package; the import costs nothing until a schema is checked).
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

__all__ = ["SchemaProblem", "meta_schema_problem", "schema_validator", "keyword_pointers", "keywords_named",
           "escape_pointer", "KEYWORDS"]

#: every keyword of drafts 3 to 2020-12 (validation, applicators, core, annotations)
KEYWORDS = frozenset({
    "$schema", "$id", "id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
    "$recursiveAnchor", "$defs", "definitions", "$comment", "$vocabulary",
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
    "maxProperties", "minProperties", "required", "dependentRequired", "format",
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies",
    "prefixItems", "items", "additionalItems", "contains", "properties", "patternProperties",
    "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
    "contentEncoding", "contentMediaType", "contentSchema", "disallow", "extends", "divisibleBy",
    "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
})

# keywords whose value is one schema, a list of schemas, or a map of names to schemas
_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "items", "contentSchema")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_LONG_MESSAGE = 240  # characters of jsonschema's message kept (it may print a whole enum)


def escape_pointer(token: str) -> str:
    """One reference token of a JSON pointer (RFC 6901: ``~`` is ``~0``, ``/`` is ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class SchemaProblem:
    """Why a schema is not one by its draft's meta-schema: ``jsonschema``'s message, the
    JSON pointer of the offending part of the schema (``""``: the schema itself), the
    ``draft`` whose meta-schema judged it (``"draft 4"``, ``"draft 2020-12"``) and the
    meta-schema's ``keyword`` that failed (``"type"``, ``"uniqueItems"``...)."""

    message: str
    pointer: str
    draft: str
    keyword: str = ""

    def __str__(self) -> str:
        by = f" (by the {self.draft} meta-schema)" if self.draft else ""
        return f"not a JSON schema at {self.pointer or '/'}{by}: {self.message}"


def _draft(cls: type) -> str:
    """``Draft202012Validator`` -> ``"draft 2020-12"``, ``Draft4Validator`` -> ``"draft 4"``."""
    digits = re.sub(r"\D", "", cls.__name__)
    return f"draft {digits[:4]}-{digits[4:]}" if len(digits) > 2 else f"draft {digits or '?'}"


@functools.cache
def _meta_validator(cls: type) -> Any:
    """The validator of ``cls``'s meta-schema (built once per draft)."""
    import jsonschema

    meta = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
    return meta(cls.META_SCHEMA, format_checker=meta.FORMAT_CHECKER)


def _validator_class(schema: Any) -> type:
    import jsonschema

    with warnings.catch_warnings():  # an unknown $schema: the latest draft judges it, as jsonschema does
        warnings.simplefilter("ignore", DeprecationWarning)
        return jsonschema.validators.validator_for(schema)


def meta_schema_problem(schema: Any) -> SchemaProblem | None:
    """None when ``schema`` is a JSON schema by the meta-schema of its draft (its
    ``$schema``; the latest draft without one, as ``jsonschema`` reads it); else the most
    relevant error (``jsonschema.exceptions.best_match``) as a :class:`SchemaProblem`."""
    import jsonschema

    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return SchemaProblem(f"a {type(schema).__name__} is not a schema (an object or a boolean)", "", "")
    cls = _validator_class(schema)
    error = jsonschema.exceptions.best_match(_meta_validator(cls).iter_errors(schema))
    if error is None:
        return None
    message = error.message
    if len(message) > _LONG_MESSAGE:
        half = _LONG_MESSAGE // 2 - 3
        message = f"{message[:half]} ... {message[-half:]}"
    pointer = "".join(f"/{escape_pointer(str(p))}" for p in error.absolute_path)
    return SchemaProblem(message, pointer, _draft(cls), str(error.validator or ""))


def schema_validator(schema: Any) -> Any:
    """A ``jsonschema`` validator of ``schema`` for its own draft, with format checks on;
    :class:`ValueError` saying :class:`SchemaProblem` for a schema its draft's
    meta-schema rejects (:func:`meta_schema_problem`)."""
    problem = meta_schema_problem(schema)
    if problem is not None:
        raise ValueError(str(problem)[:2000])
    cls = _ecma_class(_validator_class(schema))
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


#: ECMA-262's ``\s`` (WhiteSpace and LineTerminator), as the inside of a character class
_ECMA_SPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


@functools.lru_cache(maxsize=4096)
def ecma_regex(pattern: str) -> re.Pattern[str] | None:
    r"""A Python regex that matches what the ECMA-262 regex ``pattern`` (JSON Schema's
    dialect) matches, for the escapes where Python's differ: ``\w``, ``\d``, ``\b``
    and their negations are ASCII in ECMA-262 (``re.ASCII``), while ``\s`` and ``\S``
    keep ECMA's Unicode spaces (written out).  None where that cannot be written (a
    ``\S`` inside a class) or Python cannot read the pattern: the caller then keeps
    ``jsonschema``'s own reading (Python's ``re``, whose Unicode ``\w`` takes ``к``
    for a word character where ECMA-262 does not)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif e == "S":
                if in_class:
                    return None
                out.append(f"[^{_ECMA_SPACE}]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error:
        return None


def _search(pattern: str, text: str) -> bool:
    rx = ecma_regex(pattern)
    return bool(rx.search(text)) if rx is not None else re.search(pattern, text) is not None


def _exact(x: int | float) -> Fraction:
    """A JSON number as the decimal it was written as: a float by its shortest ``repr``
    (what ``json.loads`` read is the nearest double; its ``repr`` gives the text back
    for up to 15 significant digits)."""
    return Fraction(x) if isinstance(x, int) else Fraction(Decimal(repr(x)))


@functools.cache
def _ecma_class(cls: type) -> type:
    """``cls`` with ``pattern``, ``patternProperties`` and ``additionalProperties`` read
    with ECMA-262's regex semantics (:func:`ecma_regex`), as JSON Schema defines them,
    and ``multipleOf`` in exact decimal arithmetic, as the spec says (jsonschema divides
    floats: 40167204677.34 / 0.01 is no integer in binary, so it called that number no
    multiple of 0.01, and exact engines loosened)."""
    import jsonschema
    from jsonschema.exceptions import ValidationError

    def multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "number") or not validator.is_type(step, "number") or step <= 0:
            return
        if math.isfinite(instance) and (_exact(instance) / _exact(step)).denominator != 1:
            yield ValidationError(f"{instance!r} is not a multiple of {step!r}")

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not _search(patrn, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: dict, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, sub in patterns.items():
            for k, v in instance.items():
                if _search(patrn, k):
                    yield from validator.descend(v, sub, path=k, schema_path=patrn)

    def additional_properties(validator: Any, extra_schema: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        known = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = [k for k in instance if k not in known and not any(_search(p, k) for p in patterns)]
        if validator.is_type(extra_schema, "object"):
            for k in extras:
                yield from validator.descend(instance[k], extra_schema, path=k)
        elif extra_schema is False and extras:
            were = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, extras))} {were} "
                                  "unexpected)")

    return jsonschema.validators.extend(cls, {"pattern": pattern, "patternProperties": pattern_properties,
                                              "additionalProperties": additional_properties,
                                              "multipleOf": multiple_of})


def keyword_pointers(schema: Any, keywords: Collection[str]) -> Iterator[tuple[str, str]]:
    """``(keyword, pointer)`` for each of ``keywords`` in ``schema``: the JSON pointer of
    the (sub)schema object that holds it, in document order.  Only schemas are looked
    into (the values of applicators such as ``properties``, ``items``, ``anyOf``,
    ``$defs``...), so a property named ``format`` or an ``enum`` value is no keyword."""
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, pointer = stack.pop()
        if not isinstance(node, dict):
            continue
        for k in node:
            if k in keywords:
                yield k, pointer
        inner: list[tuple[Any, str]] = []
        for k in _ONE:
            if isinstance(node.get(k), dict):
                inner.append((node[k], f"{pointer}/{escape_pointer(k)}"))
        for k in _LIST:
            if isinstance(node.get(k), list):
                inner += [(x, f"{pointer}/{k}/{i}") for i, x in enumerate(node[k])]
        for k in _MAP:
            if isinstance(node.get(k), dict):
                inner += [(x, f"{pointer}/{escape_pointer(k)}/{escape_pointer(str(n))}") for n, x in node[k].items()]
        stack.extend(reversed(inner))


_QUOTED = re.compile(r"""["'`](\$?[A-Za-z]+)["'`]""")
_CAMEL = re.compile(r"\$[A-Za-z]+|\b[a-z]+[A-Z][A-Za-z]*\b")
_MIN_MAX = re.compile(r"\bmin/max([A-Z][A-Za-z]*)")


def keywords_named(message: str) -> list[str]:
    """The JSON Schema keywords ``message`` names as the ones left out, in order: after
    ``ignoring`` when it says so (``"pattern ... not supported; ignoring
    minLength/maxLength"``), before ``falling back`` (``"oneOf ... falling back to
    anyOf"``), else anywhere.  A keyword that is also an English word (``if``, ``not``,
    ``format``) counts only when quoted or followed by ``:``, and only when no camelCase
    keyword is named; ``min/maxX`` names ``minX`` and ``maxX``, "length constraints"
    ``minLength`` and ``maxLength``, a regex (no keyword named) ``pattern``."""
    text = _MIN_MAX.sub(lambda m: f"min{m.group(1)}/max{m.group(1)}", message)
    low = text.lower()
    if "ignoring" in low:
        text = text[low.rindex("ignoring") + len("ignoring"):]
    elif "falling back" in low or "fall back" in low:
        text = text[:low.find("fall")]
    if "length constraint" in low:
        return ["minLength", "maxLength"]
    found: list[str] = []
    for pick in (_CAMEL.findall, _QUOTED.findall, re.compile(r"\b([a-z]+)\s*:").findall):
        found = [w for w in pick(text) if w in KEYWORDS]
        if found:  # the surest form that names some: camelCase, else quoted, else "word:"
            break
    if not found and "regex" in low:  # a pattern's regex ("Anchor '$' in the middle of regex is ignored")
        return ["pattern"]
    return sorted(set(found), key=lambda w: text.find(w))
