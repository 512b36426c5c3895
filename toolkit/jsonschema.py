"""JSON Schema to the grammar IR, shared by every strategy.

``from_json_schema(schema)`` (also :meth:`toolkit.grammar.Grammar.from_json_schema`)
builds a :class:`~toolkit.grammar.Grammar` whose language is the JSON text of the
instances the schema accepts, as ``json.dumps`` and models write it: any JSON
encoding of strings, and flexible whitespace between tokens (``%ignore``) unless
``whitespace="compact"``.

The rule that matters most: **never looser than the schema**.  Where a keyword can
only be approximated, the grammar is *tighter* (documented below and in
:mod:`toolkit._jsonregex`), and where it cannot be expressed at all the compiler
raises :class:`~toolkit.errors.UnsupportedSchema` naming the keyword and its JSON
pointer; with ``strict=False`` the keyword is dropped with a warning that says the
grammar is looser than the schema.

Tighter than the schema, by design:

* object properties appear in the order the schema lists them; additional
  properties (when allowed) come after them, with keys written without escapes;
* enum/const values are matched in the serialization of their JSON value (objects
  in their key order, numbers as written in the schema);
* numbers with bounds are written without an exponent; see :mod:`toolkit._jsonregex`.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from typing import Any

from toolkit._jsonregex import (
    ecma_pattern,
    json_format,
    json_string,
    json_string_literal,
    number_range,
)
from toolkit.errors import LimitExceeded, UnsupportedSchema
from toolkit.grammar import Grammar, Terminal

__all__ = ["from_json_schema", "DEFAULT_MAX_RULES"]

DEFAULT_MAX_RULES = 50_000

NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
INTEGER = r"-?(?:0|[1-9][0-9]*)"
WS = r"[ \t\n\r]+"
_RAW = '[^"\\\\\\x00-\\x1f]'

# Keywords that constrain instances.  Anything else is an annotation (the spec
# tells validators to ignore unknown keywords), so it is ignored here too.
_STRING_KW = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KW = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_OBJECT_KW = (
    "properties", "required", "additionalProperties", "patternProperties", "minProperties",
    "maxProperties", "propertyNames", "dependencies", "dependentRequired", "dependentSchemas",
    "unevaluatedProperties",
)
_ARRAY_KW = (
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains",
    "minContains", "maxContains", "unevaluatedItems",
)
_GENERIC_KW = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref")
_VALIDATION = set(_STRING_KW + _NUMBER_KW + _OBJECT_KW + _ARRAY_KW + _GENERIC_KW)
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
_KW_TYPES = {
    **{k: "string" for k in _STRING_KW},
    **{k: "number" for k in _NUMBER_KW},
    **{k: "object" for k in _OBJECT_KW},
    **{k: "array" for k in _ARRAY_KW},
}


def _escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape_pointer(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


class _Compiler:
    def __init__(self, root: Any, *, whitespace: str, strict: bool, max_rules: int) -> None:
        if whitespace not in ("flexible", "compact"):
            raise ValueError(f"whitespace must be 'flexible' or 'compact', not {whitespace!r}")
        self.root = root
        self.strict = strict
        self.whitespace = whitespace
        self.max_rules = max_rules
        self.rules: dict[str, list[tuple[str, ...]]] = {}
        self.terminals: dict[str, Terminal] = {}
        self._term_by_regex: dict[str, str] = {}
        self._memo: dict[str, str] = {}
        self._any: str | None = None
        self.punct = {c: self._literal(name, c) for name, c in (
            ("LBRACE", "{"), ("RBRACE", "}"), ("LSQB", "["), ("RSQB", "]"), ("COMMA", ","), ("COLON", ":"),
        )}

    # ------------------------------------------------------------ naming --

    def _literal(self, name: str, text: str) -> str:
        t = Terminal.from_literal(name, text)
        self.terminals[name] = t
        self._term_by_regex[t.regex] = name
        return name

    def term(self, regex: str, hint: str) -> str:
        name = self._term_by_regex.get(regex)
        if name is None:
            base = re.sub(r"[^A-Z0-9]+", "_", hint.upper()).strip("_") or "T"
            name = f"{base}_{len(self.terminals)}"
            self.terminals[name] = Terminal(name, regex)
            self._term_by_regex[regex] = name
        return name

    def new_rule(self, hint: str) -> str:
        if len(self.rules) >= self.max_rules:
            raise LimitExceeded("max_rules", len(self.rules) + 1, self.max_rules)
        base = re.sub(r"[^a-z0-9]+", "_", hint.lower()).strip("_")[:40] or "r"
        name = f"{base}_{len(self.rules)}" if base != "start" else "start"
        self.rules[name] = []
        return name

    def unsupported(self, keyword: str, pointer: str, reason: str) -> None:
        if self.strict:
            raise UnsupportedSchema(keyword, pointer, reason)
        warnings.warn(
            f"JSON schema keyword {keyword!r} at {pointer or '/'} dropped ({reason}): "
            "the grammar is looser than the schema",
            stacklevel=4,
        )

    # --------------------------------------------------------- resolving --

    def resolve(self, ref: str, pointer: str) -> tuple[Any, str]:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchema("$ref", pointer, f"only local references are supported, not {ref!r}")
        node = self.root
        path = ref[1:]
        if path and not path.startswith("/"):
            raise UnsupportedSchema("$ref", pointer, f"anchors are not supported: {ref!r}")
        for token in path.split("/")[1:] if path else []:
            token = _unescape_pointer(token)
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise UnsupportedSchema("$ref", pointer, f"unresolvable reference {ref!r}")
        return node, path

    # ---------------------------------------------------------- schemas --

    def compile(self, node: Any, pointer: str) -> str:
        """The rule name for the values ``node`` (at ``pointer``) accepts."""
        if node is True or (isinstance(node, dict) and not (set(node) & _VALIDATION)):
            return self.any_value()
        if node is False:
            key = "false"
            if key not in self._memo:
                self._memo[key] = self.new_rule("nothing")
            return self._memo[key]
        if not isinstance(node, dict):
            raise UnsupportedSchema("schema", pointer, f"a schema must be an object or a boolean, not {type(node).__name__}")
        # Memo by content: references are root-relative, so equal content is an equal
        # language, and recursion through merged subschemas reaches a fixed point.
        key = json.dumps(node, sort_keys=True, default=repr)
        if key in self._memo:
            return self._memo[key]
        name = self.new_rule("start" if pointer == "" else pointer.rsplit("/", 1)[-1])
        self._memo[key] = name
        self.rules[name] = self.alternatives(node, pointer)
        return name

    def alternatives(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        node = dict(node)
        if "$ref" in node:
            target, target_ptr = self.resolve(node.pop("$ref"), pointer + "/$ref")
            if not (set(node) & _VALIDATION):
                return [(self.compile(target, target_ptr),)]
            node = self.merge([target, node], pointer)
        if "allOf" in node:
            parts = node.pop("allOf")
            if not isinstance(parts, list):
                raise UnsupportedSchema("allOf", pointer, "allOf must be a list")
            node = self.merge(parts + [node], pointer + "/allOf")
            return self.alternatives(node, pointer) if "$ref" in node or "allOf" in node else self._body(node, pointer)
        return self._body(node, pointer)

    def _body(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        for kw in ("anyOf", "oneOf"):
            if kw in node:
                branches = node[kw]
                if not isinstance(branches, list) or not branches:
                    raise UnsupportedSchema(kw, pointer, f"{kw} must be a non-empty list")
                rest = {k: v for k, v in node.items() if k != kw}
                if set(rest) & _VALIDATION:
                    merged = [self.merge([rest, b], f"{pointer}/{kw}/{i}") for i, b in enumerate(branches)]
                else:
                    merged = branches
                if kw == "oneOf" and not self._disjoint(merged):
                    self.unsupported("oneOf", pointer, "branches may overlap, and oneOf rejects values matching two")
                return [(self.compile(m, f"{pointer}/{kw}/{i}"),) for i, m in enumerate(merged)]
        for kw in ("not", "if", "then", "else"):
            if kw in node:
                self.unsupported(kw, pointer + "/" + kw, "cannot be expressed as a grammar")
        if "enum" in node or "const" in node:
            return self._enum(node, pointer)
        types = self._types(node, pointer)
        alts = []
        for t in types:
            alts.extend(self._typed(t, node, pointer))
        return alts

    def _types(self, node: dict, pointer: str) -> list[str]:
        t = node.get("type")
        if t is None:
            return ["null", "boolean", "object", "array", "number", "string"]
        types = t if isinstance(t, list) else [t]
        for x in types:
            if x not in _TYPES:
                raise UnsupportedSchema("type", pointer + "/type", f"unknown type {x!r}")
        out = [x for x in _TYPES if x in types]
        if "number" in out and "integer" in out:
            out.remove("integer")
        return out

    # ------------------------------------------------------------- merge --

    def merge(self, parts: list[Any], pointer: str, depth: int = 0) -> dict:
        """allOf: one schema accepting exactly what every part accepts, or UnsupportedSchema."""
        if depth > 32:
            raise UnsupportedSchema("allOf", pointer, "references nest too deeply to merge")
        flat: list[dict] = []
        for i, part in enumerate(parts):
            if part is True:
                continue
            if part is False:
                return {"not": {}}
            if not isinstance(part, dict):
                raise UnsupportedSchema("allOf", f"{pointer}/{i}", "a schema must be an object or a boolean")
            part = dict(part)
            if "$ref" in part:
                target, _ = self.resolve(part.pop("$ref"), f"{pointer}/{i}/$ref")
                part = self.merge([target, part], f"{pointer}/{i}", depth + 1)
            if "allOf" in part:
                inner = part.pop("allOf")
                if not isinstance(inner, list):
                    raise UnsupportedSchema("allOf", f"{pointer}/{i}/allOf", "allOf must be a list")
                part = self.merge(inner + [part], f"{pointer}/{i}/allOf", depth + 1)
            flat.append(part)
        out: dict[str, Any] = {}
        for i, part in enumerate(flat):
            for k, v in part.items():
                if k not in _VALIDATION:
                    out.setdefault(k, v)
                elif k not in out:
                    out[k] = v
                else:
                    out[k] = self._merge_keyword(k, out[k], v, f"{pointer}/{i}/{k}")
        # additionalProperties speaks of its own part's properties: another part may
        # not add names to it, or the merge would be looser than the schema.
        names = set(out.get("properties", {}))
        for i, part in enumerate(flat):
            if part.get("additionalProperties", True) is not True or part.get("patternProperties"):
                if not names <= set(part.get("properties", {})):
                    raise UnsupportedSchema("allOf", f"{pointer}/{i}/additionalProperties",
                                            "additionalProperties with properties from another subschema")
        return out

    def _merge_keyword(self, k: str, a: Any, b: Any, pointer: str) -> Any:
        if a == b:
            return a
        if k == "type":
            ta = set(a if isinstance(a, list) else [a])
            tb = set(b if isinstance(b, list) else [b])
            both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or ("number" in ta and "integer" in tb) else set())
            return [t for t in _TYPES if t in both]
        if k == "required":
            return list(dict.fromkeys(list(a) + list(b)))
        if k == "properties":
            merged = dict(a)
            for name, s in b.items():
                merged[name] = {"allOf": [merged[name], s]} if name in merged else s
            return merged
        if k in ("minLength", "minItems", "exclusiveMinimum") and _numbers(a, b):
            return max(a, b)
        if k in ("maxLength", "maxItems", "exclusiveMaximum") and _numbers(a, b):
            return min(a, b)
        if k in ("anyOf", "oneOf"):
            raise UnsupportedSchema(k, pointer, f"allOf of two {k} lists")
        if k == "enum" and isinstance(a, list) and isinstance(b, list):
            keep = {json.dumps(x, sort_keys=True) for x in b}
            return [x for x in a if json.dumps(x, sort_keys=True) in keep]
        raise UnsupportedSchema("allOf", pointer, f"cannot merge two different {k!r} keywords exactly")

    def _disjoint(self, branches: list[dict]) -> bool:
        """True when no JSON value can match two of the (merged) oneOf branches."""
        sigs = []
        for b in branches:
            if b is False or (isinstance(b, dict) and b.get("not") == {}):
                continue
            if b is True:
                return len(branches) == 1
            if "$ref" in b or "allOf" in b:
                b = self.merge([b], "")
            types = set(self._types(b, "")) if "enum" not in b and "const" not in b else {
                _json_type(v) for v in (b["enum"] if "enum" in b else [b["const"]])
            }
            if "number" in types:
                types.add("integer")
            values = None
            if "enum" in b or "const" in b:
                values = [json.dumps(v, sort_keys=True) for v in (b["enum"] if "enum" in b else [b["const"]])]
            sigs.append((types, values, b))
        for i in range(len(sigs)):
            for j in range(i + 1, len(sigs)):
                ti, vi, bi = sigs[i]
                tj, vj, bj = sigs[j]
                if not (ti & tj):
                    continue
                if vi is not None and vj is not None and not set(vi) & set(vj):
                    continue
                if self._discriminated(bi, bj):
                    continue
                return False
        return True

    @staticmethod
    def _discriminated(a: dict, b: dict) -> bool:
        """Both are objects requiring a property whose const/enum values differ."""
        if a.get("type") != "object" or b.get("type") != "object":
            return False
        pa, pb = a.get("properties", {}), b.get("properties", {})
        for name in set(a.get("required", [])) & set(b.get("required", [])):
            sa, sb = pa.get(name), pb.get(name)
            if not isinstance(sa, dict) or not isinstance(sb, dict):
                continue
            va = sa["enum"] if "enum" in sa else [sa["const"]] if "const" in sa else None
            vb = sb["enum"] if "enum" in sb else [sb["const"]] if "const" in sb else None
            if va is not None and vb is not None:
                if not {json.dumps(v, sort_keys=True) for v in va} & {json.dumps(v, sort_keys=True) for v in vb}:
                    return True
        return False

    # -------------------------------------------------------------- enum --

    def _enum(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        if "enum" in node:
            values = node["enum"]
            if not isinstance(values, list):
                raise UnsupportedSchema("enum", pointer + "/enum", "enum must be a list")
            if "const" in node:
                values = [v for v in values if v == node["const"] and type(v) is type(node["const"])]
        else:
            values = [node["const"]]
        rest = {k: v for k, v in node.items() if k in _VALIDATION and k not in ("enum", "const")}
        if rest:
            values = [v for v in values if self._valid(v, rest, pointer)]
        alts = []
        seen = set()
        for v in values:
            key = json.dumps(v, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            alts.append((self.value_literal(v),))
        return alts

    def _valid(self, value: Any, schema: dict, pointer: str) -> bool:
        """Does ``value`` satisfy ``schema`` (enum siblings)?  Decided by jsonschema."""
        import jsonschema

        if set(schema) <= {"type"}:
            types = set(schema["type"] if isinstance(schema["type"], list) else [schema["type"]])
            jt = _json_type(value)
            return jt in types or (jt == "integer" and "number" in types)
        probe = dict(schema)
        if isinstance(self.root, dict):
            for defs in ("$defs", "definitions"):
                if defs in self.root and defs not in probe:
                    probe[defs] = self.root[defs]
        try:
            cls = jsonschema.validators.validator_for(self.root if isinstance(self.root, dict) else {})
            return cls(probe, format_checker=cls.FORMAT_CHECKER).is_valid(value)
        except Exception as e:  # noqa: BLE001 - an unresolvable ref among enum siblings
            raise UnsupportedSchema("enum", pointer, f"cannot check enum values against sibling keywords ({e})") from e

    def value_literal(self, v: Any) -> str:
        """A symbol matching exactly the JSON text of value ``v`` (up to string encoding)."""
        if v is None or isinstance(v, bool):
            text = json.dumps(v)
            return self._term_by_regex.get(re.escape(text)) or self._literal(text.upper(), text)
        if isinstance(v, (int, float)):
            if isinstance(v, float) and v != v:
                raise UnsupportedSchema("enum", "", "NaN is not JSON")
            return self.term(re.escape(json.dumps(v)), "NUM")
        if isinstance(v, str):
            return self.term(json_string_literal(v), "STR")
        name = self.new_rule("literal")
        if isinstance(v, list):
            seq: list[str] = [self.punct["["]]
            for i, x in enumerate(v):
                if i:
                    seq.append(self.punct[","])
                seq.append(self.value_literal(x))
            seq.append(self.punct["]"])
        else:
            seq = [self.punct["{"]]
            for i, (k, x) in enumerate(v.items()):
                if i:
                    seq.append(self.punct[","])
                seq += [self.term(json_string_literal(k), "KEY"), self.punct[":"], self.value_literal(x)]
            seq.append(self.punct["}"])
        self.rules[name] = [tuple(seq)]
        return name

    # ------------------------------------------------------------- types --

    def _typed(self, t: str, node: dict, pointer: str) -> list[tuple[str, ...]]:
        if t == "null":
            return [(self.value_literal(None),)]
        if t == "boolean":
            return [(self.value_literal(True),), (self.value_literal(False),)]
        if t in ("number", "integer"):
            return [(self._number(node, pointer, integer=(t == "integer")),)]
        if t == "string":
            return [(self._string(node, pointer),)]
        if t == "object":
            return self._object(node, pointer)
        return self._array(node, pointer)

    def _number(self, node: dict, pointer: str, *, integer: bool) -> str:
        lo = node.get("minimum")
        hi = node.get("maximum")
        lo_x = hi_x = False
        emin, emax = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
        if isinstance(emin, bool):  # draft 4: a flag on minimum
            lo_x = emin and lo is not None
        elif _numbers(emin):
            if lo is None or emin >= lo:
                lo, lo_x = emin, True
        if isinstance(emax, bool):
            hi_x = emax and hi is not None
        elif _numbers(emax):
            if hi is None or emax <= hi:
                hi, hi_x = emax, True
        for k, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and not _numbers(v):
                raise UnsupportedSchema(k, f"{pointer}/{k}", f"{k} must be a number")
        if "multipleOf" in node:
            m = node["multipleOf"]
            if not (integer and _numbers(m) and float(m) == 1.0):
                self.unsupported("multipleOf", f"{pointer}/multipleOf", "multiples cannot be expressed")
        if lo is None and hi is None:
            return self.term(INTEGER if integer else NUMBER, "INT" if integer else "NUMBER")
        regex = number_range(lo, hi, lo_exclusive=lo_x, hi_exclusive=hi_x, integer=integer)
        return self.term(regex, "INT" if integer else "NUMBER")

    def _string(self, node: dict, pointer: str) -> str:
        lo = node.get("minLength", 0)
        hi = node.get("maxLength")
        pattern = node.get("pattern")
        fmt = node.get("format")
        fmt_regex = json_format(fmt, pointer=pointer + "/format") if isinstance(fmt, str) else None
        if pattern is not None and fmt_regex is not None:
            self.unsupported("format", pointer + "/format", "format together with pattern")
            fmt_regex = None
        if (pattern is not None or fmt_regex is not None) and (lo or hi is not None):
            kw = "pattern" if pattern is not None else "format"
            self.unsupported("maxLength" if hi is not None else "minLength", pointer,
                             f"length limits together with {kw}")
            lo, hi = 0, None
        if pattern is not None:
            if not isinstance(pattern, str):
                raise UnsupportedSchema("pattern", pointer + "/pattern", "pattern must be a string")
            return self.term(ecma_pattern(pattern, pointer=pointer + "/pattern"), "STRING")
        if fmt_regex is not None:
            return self.term(fmt_regex, "STRING")
        return self.term(json_string(lo, hi, pointer=pointer), "STRING")

    def _object(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        props = node.get("properties", {})
        if not isinstance(props, dict):
            raise UnsupportedSchema("properties", pointer + "/properties", "properties must be an object")
        required = node.get("required", [])
        if not isinstance(required, list):
            raise UnsupportedSchema("required", pointer + "/required", "required must be a list")
        for kw in ("minProperties", "maxProperties", "propertyNames", "dependencies", "dependentRequired",
                   "dependentSchemas", "unevaluatedProperties"):
            if kw in node and not (kw == "minProperties" and node[kw] == 0):
                self.unsupported(kw, f"{pointer}/{kw}", "not expressible by this compiler")
        additional = node.get("additionalProperties", True)
        if node.get("patternProperties") and additional is not False:
            # With additionalProperties false, leaving the pattern-matched keys out is
            # tighter than the schema; otherwise their values would go unchecked.
            self.unsupported("patternProperties", pointer + "/patternProperties",
                             "pattern-matched keys next to additional properties")
        missing = [r for r in required if r not in props]
        if missing:
            if additional is False:
                return []  # a required property that may never appear: no instance
            # Required names outside properties are additional properties that must appear.
            props = {**props, **{r: additional for r in missing}}
        names = list(props)
        req = set(required)
        pairs = []
        for name in names:
            sub = f"{pointer}/properties/{_escape_pointer(name)}"
            if props[name] is False:
                if name in req:
                    return []
                pairs.append(None)
                continue
            pair = self.new_rule(f"pair_{name}")
            key = self.term(json_string_literal(name), "KEY")
            self.rules[pair] = [(key, self.punct[":"], self.compile(props[name], sub))]
            pairs.append(pair)
        comma = self.punct[","]
        # tail(e): the additional properties after the listed ones; e = a pair came before.
        tails: dict[bool, str] = {}
        extra = None
        if additional is not False:
            extra = self.new_rule("additional_pair")
            self.rules[extra] = [(
                self.term(_key_excluding(names), "AKEY"),
                self.punct[":"],
                self.compile(additional, pointer + "/additionalProperties"),
            )]
            more = self.new_rule("additional_more")
            self.rules[more] = [(), (comma, extra, more)]
        for e in (False, True):
            tail = self.new_rule("props_end")
            alts: list[tuple[str, ...]] = [()]
            if extra is not None:
                alts.append(((comma,) if e else ()) + (extra, more))
            self.rules[tail] = alts
            tails[e] = tail
        # chain(i, e): properties i.. in order; skipping is allowed for optional ones.
        nxt = tails
        for i in range(len(names) - 1, -1, -1):
            cur = {}
            for e in (False, True):
                r = self.new_rule(f"props_{i}")
                alts = []
                if pairs[i] is not None:
                    alts.append(((comma,) if e else ()) + (pairs[i], nxt[True]))
                if names[i] not in req or pairs[i] is None:
                    alts.append((nxt[e],))
                self.rules[r] = alts
                cur[e] = r
            nxt = cur
        return [(self.punct["{"], nxt[False], self.punct["}"])]

    def _array(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        items = node.get("items")
        prefix = node.get("prefixItems")
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, rest, rest_ptr = items, node.get("additionalItems", True), pointer + "/additionalItems"
        else:
            prefix = prefix or []
            rest, rest_ptr = (items if items is not None else True), pointer + "/items"
        lo = node.get("minItems", 0)
        hi = node.get("maxItems")
        if not isinstance(lo, int) or (hi is not None and not isinstance(hi, int)):
            raise UnsupportedSchema("minItems", pointer, "minItems/maxItems must be integers")
        if rest is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        for kw in ("contains", "minContains", "maxContains", "unevaluatedItems"):
            if kw in node:
                self.unsupported(kw, f"{pointer}/{kw}", "not expressible by this compiler")
        if node.get("uniqueItems") is True and (hi is None or hi > 1):
            self.unsupported("uniqueItems", pointer + "/uniqueItems", "uniqueness cannot be expressed")
        if hi is not None and hi < lo:
            return []
        unroll = max(len(prefix), lo) if hi is None else hi
        if unroll > 2000:
            raise UnsupportedSchema("maxItems" if hi is not None else "minItems", pointer, f"{unroll} items to unroll")

        def elem(k: int) -> str:
            if k < len(prefix):
                return self.compile(prefix[k], f"{pointer}/{'items' if isinstance(items, list) else 'prefixItems'}/{k}")
            return self.compile(rest, rest_ptr)

        comma = self.punct[","]
        # after(k): what may follow once k >= 1 items were written.
        if hi is None:
            loop = self.new_rule("items_more")
            self.rules[loop] = [(), (comma, elem(unroll), loop)]
            after = loop
        else:
            after = self.new_rule("items_end")
            self.rules[after] = [()]
        for k in range(unroll - 1, 0, -1):
            r = self.new_rule(f"items_{k}")
            alts = [(comma, elem(k), after)]
            if k >= lo:
                alts.append(())
            self.rules[r] = alts
            after = r
        body: list[tuple[str, ...]] = []
        if lo == 0:
            body.append((self.punct["["], self.punct["]"]))
        if hi is None or hi >= 1:
            body.append((self.punct["["], elem(0), after, self.punct["]"]))
        return body

    # --------------------------------------------------------- any value --

    def any_value(self) -> str:
        if self._any is None:
            v = self._any = self.new_rule("json_value")
            string = self.term(json_string(), "STRING")
            number = self.term(NUMBER, "NUMBER")
            comma, colon = self.punct[","], self.punct[":"]
            members, elems = self.new_rule("json_members"), self.new_rule("json_elements")
            self.rules[members] = [(string, colon, v), (members, comma, string, colon, v)]
            self.rules[elems] = [(v,), (elems, comma, v)]
            self.rules[v] = [
                (self.punct["{"], self.punct["}"]),
                (self.punct["{"], members, self.punct["}"]),
                (self.punct["["], self.punct["]"]),
                (self.punct["["], elems, self.punct["]"]),
                (string,), (number,),
                (self.value_literal(True),), (self.value_literal(False),), (self.value_literal(None),),
            ]
        return self._any

    def grammar(self) -> Grammar:
        start = self.compile(self.root, "")
        if start != "start":
            self.rules["start"] = [(start,)]
        ignore: tuple[str, ...] = ()
        if self.whitespace == "flexible":
            self.terminals["WS"] = Terminal("WS", WS)
            ignore = ("WS",)
        rules = {k: tuple(v) for k, v in self.rules.items()}
        return Grammar(start="start", rules=rules, terminals=self.terminals, ignore=ignore,
                       source=json.dumps(self.root) if not isinstance(self.root, bool) else str(self.root))


def _numbers(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)


def _class_excluding(chars: set[str]) -> str:
    body = "".join("\\" + c if c in "\\]^-[" else c for c in sorted(chars))
    return '[^"\\\\\\x00-\\x1f' + body + "]"


def _key_excluding(names: list[str]) -> str:
    """A JSON key written without escapes that is none of ``names``.

    Built on the trie of the names: from each node, either stop (if the node is not
    a name), or take a character that leaves the trie (then anything), or follow a
    child.  Names holding characters that need escaping can never be written
    without escapes, so they need no exclusion.
    """
    trie: dict = {}
    for n in names:
        if all(c not in '"\\' and ord(c) >= 0x20 for c in n):
            node = trie
            for c in n:
                node = node.setdefault(c, {})
            node[""] = {}

    def rx(node: dict) -> str:
        children = {c: sub for c, sub in node.items() if c}
        alts = []
        if "" not in node:
            alts.append("")
        alts.append(_class_excluding(set(children)) + _RAW + "*")
        for c, sub in sorted(children.items()):
            alts.append(re.escape(c) + rx(sub))
        return "(?:" + "|".join(alts) + ")"

    return '"' + (rx(trie) if trie else _RAW + "*") + '"'


def from_json_schema(
    schema: Any,
    *,
    whitespace: str = "flexible",
    strict: bool = True,
    max_rules: int = DEFAULT_MAX_RULES,
) -> Grammar:
    """Compile a JSON Schema (a dict, a boolean, or JSON text) to a :class:`Grammar`.

    ``whitespace="flexible"`` allows JSON whitespace between tokens,
    ``"compact"`` none.  ``strict=False`` drops keywords the compiler cannot express
    (with a warning: the grammar is then looser than the schema).
    """
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise UnsupportedSchema("schema", "", f"not JSON: {e}") from e
    if not isinstance(schema, (dict, bool)):
        raise UnsupportedSchema("schema", "", f"a schema must be an object or a boolean, not {type(schema).__name__}")
    if isinstance(schema, Mapping) and not isinstance(schema, dict):
        schema = dict(schema)
    return _Compiler(schema, whitespace=whitespace, strict=strict, max_rules=max_rules).grammar()
