"""JSON Schema to the grammar IR, shared by every strategy.

``from_json_schema(schema)`` (also :meth:`toolkit.grammar.Grammar.from_json_schema`)
builds a :class:`~toolkit.grammar.Grammar` whose language is the JSON text of the
instances the schema accepts, as ``json.dumps`` and models write it: any JSON
encoding of strings, and flexible whitespace between tokens (``%ignore``) unless
``whitespace="compact"``.

The rule that matters most: **never looser than the schema**.  Where a keyword can
only be approximated, the grammar is *tighter* (documented below and in
:mod:`toolkit.automata.jsontext`), and where it cannot be expressed at all the compiler
raises :class:`~toolkit.core.errors.UnsupportedSchema` naming the keyword and its JSON
pointer; with ``strict=False`` the keyword is dropped with a warning that says the
grammar is looser than the schema.

Tighter than the schema, by design:

* object properties appear in the order the schema lists them (with
  ``property_order="any"``, in any order: then a listed key may appear twice, as
  additional keys always could, see the last point); additional properties (when
  allowed) come after them, with keys written without escapes;
* ``multipleOf`` matches numbers written without exponent (exact decimal
  arithmetic otherwise, as the spec says: 0.07 is a multiple of 0.01);
* in drafts 3 to 7 the keywords beside ``$ref`` are ignored, as those drafts say;
  keywords a draft does not have are ignored where reading them would loosen
  another (``minContains`` before 2019-09, ``prefixItems`` before 2020-12), in a
  complement (``not``, the other branches of a ``oneOf``) and in a proof that two
  schemas are disjoint, and compiled otherwise (``const`` in draft 4: tighter, as the
  engines read it; those drafts' validators ignore them); a schema left with no value
  by such a reading is refused, not called unsatisfiable;
* enum/const values are matched in the serialization of their JSON value (objects
  in their key order, numbers as written in the schema);
* numbers with bounds are written without an exponent; see :mod:`toolkit.automata.jsontext`;
* in the complement of a schema (``not``, and ``oneOf``'s "this branch and no
  other"), non-integral numbers are written without an exponent, excluded integer
  values only in their canonical spelling (the integer type has no other), a
  non-integral number listed in a negated ``enum`` takes every non-integral number
  along, and arrays or objects it lists are left by the first item or member where a
  value differs from all of them, the items or members before it matched in their
  serialization (the complement itself is exact; at most 256 listed values in all);
* JSON texts with a repeated key are outside the model (``json.dumps`` never
  writes one): member counts count written members.

How the boolean keywords compile exactly:

* string keywords are each one regex of JSON string text, intersected in one
  terminal (:class:`~toolkit.grammar.Terminal` ``also``/``excluding``), so
  ``maxLength`` with ``pattern`` or ``format``, and two patterns, are exact;
* ``not`` is rewritten as the union of the violations of its keywords (a schema is
  the conjunction of its keywords, and each constrains only its own type) and
  merged into the rest of the schema; ``if``/``then``/``else`` becomes
  ``(if and then) or (not if and else)``; ``dependencies`` "absent, or present
  with what it needs";
* ``oneOf`` is a union when its branches are provably disjoint (types, required vs
  forbidden properties, constants, numeric ranges, string languages); otherwise
  each branch is conjoined with the negation of every branch it may overlap;
* the anyOf lists of an ``allOf`` (those negations, among others) multiply out, less
  what takes no value: branches the other parts rule out, pairs provably apart,
  conjunctions that include another's conjuncts; "property n present, some value"
  where another part pins n to values the branch takes, and "some additional
  member" next to a closed object as one branch per name it allows (at most 4096
  conjunctions);
* objects count members up to ``minProperties``/``maxProperties``, take pattern
  members (one rule per set of patterns a key matches) and additional members
  after the listed properties; arrays track whether an item matched ``contains``;
* ``uniqueItems`` where every item is one of finitely many values (enum, const,
  null, boolean, short integer ranges, unions of those; at most 4096 sets of them
  reachable): a rule per set of values used so far.  Past that, and where an item
  may take infinitely many values, it is unsupported.

Bounded on any schema, and bad ones refused before any work depends on them:

* nesting is measured first, without recursion (:func:`_check_nesting`): past
  ``max_depth`` schemas in schemas (or arrays and objects anywhere past twice that and
  32) a :class:`~toolkit.core.errors.LimitExceeded` names the JSON pointer, so no
  recursive pass (``json.dumps``, the reference pass, the compile) meets Python's stack
  limit; the disjointness proofs that prune anyOf products bound their own nesting, and
  answer "maybe" (the exact side) where a proof meets a schema it is already merging;
* every keyword value the compiler reads is checked (:meth:`_Compiler._survey`):
  :class:`~toolkit.core.errors.InvalidSchema` names the keyword, the value and its
  pointer (``maxLength: 2.5`` is refused, not rounded); a likely misspelled keyword
  (``requried``) is warned about; ``enum``/``const`` sizes past ``max_enum`` or
  ``max_enum_bytes`` are refused up front;
* merges are kept per parts, disjointness per pair (conjunctions by their conjuncts),
  and the proofs read an *outline* of a conjunction (its anyOf lists side by side, not
  multiplied out: at least its values, so a proof about it holds), so that a product
  of anyOf lists costs what it leaves, not what each check of it would multiply;
* the compile checks the cooperative deadline
  (:func:`~toolkit.core.errors.check_deadline`, option ``compile_timeout``) at each
  subschema and in every loop that can run long, and every ``LimitExceeded`` it raises
  carries the pointer where it fired (``e.pointer``).
"""

from __future__ import annotations

import difflib
import functools
import itertools
import json
import math
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, get_args

from toolkit.automata import jsontext
from toolkit.automata.dfaops import (
    Form,
    JsonKeysForm,
    JsonStringForm,
    WordsForm,
    compile_boolean,
    disjoint,
)
from toolkit.automata.jsontext import NOTHING, json_string, json_string_literal
from toolkit.automata.regex import compile_regex
from toolkit.core.errors import (
    DEFAULT_COMPILE_TIMEOUT,
    GrammarError,
    InvalidSchema,
    LimitExceeded,
    MasklabError,
    TimeLimitExceeded,
    Unsatisfiable,
    UnsupportedSchema,
    check_deadline,
    deadline,
)
from toolkit.grammar.embed import register_schema_compiler
from toolkit.grammar.inputs import InputFormat, format_of, read, register_format
from toolkit.grammar.ir import Grammar, Terminal
from toolkit.jsonschema.ecma import ecma_pattern
from toolkit.jsonschema.formats import json_format
from toolkit.jsonschema.numbers import decimal_step, multiple_of, number_range

__all__ = ["from_json_schema", "DEFAULT_MAX_RULES", "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_ENUM", "DEFAULT_MAX_ENUM_BYTES",
           "PROPERTY_ORDERS", "ANY_ORDER_MAX", "SPELLINGS", "JsonSchemaText", "schema_text", "schema_value", "grammar_of",
           "json_schema_to_regex"]

DEFAULT_MAX_RULES = 50_000
DEFAULT_MAX_DEPTH = 100  # nested schemas (each a few Python frames deep in the compiler)
DEFAULT_MAX_ENUM = 10_000  # values one enum may list (each a terminal of the grammar)
DEFAULT_MAX_ENUM_BYTES = 1_000_000  # bytes of JSON text the enum and const values of a schema may take in all
_JSON_DEPTH_SLACK = 32  # arrays and objects may nest 2 * max_depth + this deep (values in enum, const, annotations)
PROPERTY_ORDERS = ("schema", "any")
"""``property_order``: ``"schema"`` writes listed properties in the schema's order (as
llguidance and xgrammar do), ``"any"`` in any order (see :meth:`_Compiler._any_order`)."""

Whitespace = Literal["flexible", "compact"]
"""``whitespace``: ``"flexible"`` (any JSON whitespace between tokens) or ``"compact"``
(none); the type engines declare their option with."""

WHITESPACES: tuple[str, ...] = get_args(Whitespace)

Spelling = Literal["json", "llguidance"]
"""``spelling`` (see :data:`SPELLINGS`); the type engines declare their option with."""

SPELLINGS: tuple[str, ...] = get_args(Spelling)
assert SPELLINGS == jsontext.SPELLINGS
"""``spelling``: how strings may be written.  ``"json"`` (default): every JSON text of
the value (escapes as JSON means them).  ``"llguidance"``: as llguidance's schema
compiler writes them, a subset (never looser than the schema): object keys as the one
text ``json.dumps(value, ensure_ascii=False)`` writes, other strings (string ``const``
and ``enum`` values too) with the characters of
:data:`toolkit.automata.jsontext.LLGUIDANCE_CHAR` (``\\u`` only for controls and DEL, no ``\\/``).
The Lark reader's ``%json`` uses it."""
_CONTROL = re.compile("[\x00-\x1f\x7f]")  # the characters llguidance's JSON quoting writes other than json.dumps
ANY_ORDER_MAX = 20_000
"""Largest object written in any order: (2 ** required names) x (kinds of member + 1)
alternatives; larger ones keep the schema's order."""


@dataclass(frozen=True)
class JsonSchemaText:
    """A JSON schema given as text, to hand to an engine's own schema compiler verbatim."""

    text: str


def schema_text(spec: Any) -> str | None:
    """The JSON text of a schema spec (dict, bool or :class:`JsonSchemaText`), or None
    when ``spec`` is not a schema.  What every engine that takes schemas natively reads."""
    if isinstance(spec, JsonSchemaText):
        return spec.text
    if isinstance(spec, Mapping | bool):
        return json.dumps(spec)
    return None


def schema_value(spec: Any) -> Any:
    """The schema a spec holds: a :class:`JsonSchemaText`'s text parsed (a
    :class:`GrammarError` at the line and column where it is not JSON), anything else as
    it is."""
    if not isinstance(spec, JsonSchemaText):
        return spec
    try:
        return json.loads(spec.text)
    except json.JSONDecodeError as e:
        raise GrammarError(f"the JSON schema is not JSON: {e.msg}", e.lineno, e.colno) from None
    except RecursionError:
        return _loads(spec.text, DEFAULT_MAX_DEPTH)  # (raises the LimitExceeded, with the pointer)


def grammar_of(spec: Any, *, whitespace: str, engine: str, spelling: str = "json") -> tuple[Grammar, str]:
    """``(Grammar, kind)`` for what a Grammar-based strategy compiles: a
    :class:`Grammar` as it is (``"grammar"``), or an input of any registered format
    (:mod:`toolkit.grammar.inputs`) read to the IR, its kind the format's name
    (``"regex"``, ``"json_schema"`` with our compiler's ``whitespace`` and ``spelling``;
    Lark, GBNF and other grammar texts are ``"grammar"``).  A bare ``str`` (which format
    is it?) and anything else is an :class:`~toolkit.core.errors.UnsupportedGrammar`
    naming ``engine``."""
    if schema_text(spec) is not None:  # a schema: compiled here (not through the formats' registry and back)
        return from_json_schema(schema_value(spec), whitespace=whitespace, spelling=spelling), "json_schema"
    grammar = read(spec, engine=engine)
    fmt = format_of(spec)
    kind = "grammar" if fmt is None or fmt.name != "regex" else fmt.name
    return grammar, kind


_MAX_BRANCHES = 256  # most alternatives a rewrite (anyOf products, oneOf, not) may make
_MAX_PAIRS = 16_384  # most pairs of branches an anyOf product looks at (before dropping the empty ones)
_MAX_FLAT_NESTING = 12  # most merges _flat may nest (each reads disjointness, which flattens others)
_MAX_PROOF_NESTING = 48  # most _disjoint_pair calls in progress at once, through all those merges
_MAX_PRODUCT = 4096  # most conjunctions an anyOf product may leave (3532 in MaskBench's o21819: 3.5 s)

NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
INTEGER = r"-?(?:0|[1-9][0-9]*)"
WS = r"[ \t\n\r]+"
_RAW = '[^"\\\\\\x00-\\x1f]'

# Keywords that constrain instances.  Anything else is an annotation (the spec
# tells validators to ignore unknown keywords), so it is ignored here too.
# Internal keywords (never in user schemas: "$" names are not validation keywords
# in any draft) that negation and merging produce: regexes of JSON string text a
# string must also match / must not match, and canonical integer texts to exclude.
ALSO_STRINGS = "$masklab:also_strings"
NOT_STRINGS = "$masklab:not_strings"
NOT_INTEGERS = "$masklab:not_integers"
FRACTIONAL = "$masklab:fractional"
NOT_MULTIPLES = "$masklab:not_multiples"  # steps a number must not be a multiple of
SOME_ADDITIONAL = "$masklab:some_additional"  # a schema one additional member's value must match  # true: a number with a nonzero fraction, written without exponent
_ANY_LISTS = "$masklab:any_lists"  # (outline merges only, never compiled) anyOf/oneOf lists a value matches one of each
_INTERNAL = (ALSO_STRINGS, NOT_STRINGS, NOT_INTEGERS, NOT_MULTIPLES)
_FRACTION = r"-?(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*"

_STRING_KW = ("minLength", "maxLength", "pattern", "format", ALSO_STRINGS, NOT_STRINGS)
_NUMBER_KW = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NOT_INTEGERS, FRACTIONAL,
               NOT_MULTIPLES)
_OBJECT_KW = (
    "properties", "required", "additionalProperties", "patternProperties", "minProperties",
    "maxProperties", "propertyNames", SOME_ADDITIONAL, "dependencies", "dependentRequired", "dependentSchemas",
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
    def __init__(self, root: Any, *, whitespace: str, strict: bool, max_rules: int,
                 max_depth: int = DEFAULT_MAX_DEPTH, property_order: str = "schema",
                 spelling: str = "json", max_enum: int = DEFAULT_MAX_ENUM,
                 max_enum_bytes: int = DEFAULT_MAX_ENUM_BYTES) -> None:
        self.spelling = jsontext.check_spelling(spelling)
        if whitespace not in WHITESPACES:
            raise ValueError(f"whitespace must be 'flexible' or 'compact', not {whitespace!r}")
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {', '.join(map(repr, PROPERTY_ORDERS))}, "
                             f"not {property_order!r}")
        self.property_order = property_order
        self.root = root
        draft = root.get("$schema") if isinstance(root, dict) else None
        self._ref_alone = isinstance(draft, str) and re.search(r"draft-0[3-7]/", draft) is not None
        # keywords of other drafts, read tighter where they constrain, never where that
        # would loosen: in a complement, or in a proof that two schemas are disjoint
        self._lacking = _lacking_keywords(root)
        # exclusiveMinimum/Maximum: a flag on minimum/maximum in drafts 3 and 4, a number
        # from draft 6 on (None: no draft named, either form read)
        self._flag_bounds = None if not isinstance(draft, str) or not re.search(r"draft-0\d/|draft/20", draft) \
            else re.search(r"draft-0[34]/", draft) is not None
        self.strict = strict
        self.whitespace = whitespace
        self.max_rules = max_rules
        self.max_depth = max_depth
        self.max_enum = max_enum
        self.max_enum_bytes = max_enum_bytes
        self._depth = 0
        self._at = ""  # the pointer of the schema being compiled (where a limit fired)
        self.rules: dict[str, list[tuple[str, ...]]] = {}
        self.terminals: dict[str, Terminal] = {}
        self._term_by_regex: dict[object, str] = {}
        # the regex texts this compile wrote from data (a string's length bounds, listed keys,
        # string values): their terminals carry the data (Terminal.forms), not just the text
        self._forms: dict[str, Form] = {}
        self._memo: dict[str, str] = {}
        self._where: dict[str, tuple[Any, str]] = {}  # each schema's rule: (the schema, its pointer)
        # where the grammar was made tighter than the schema (the module doc's list) in a
        # way that can drop values: an empty language after one is not proof of an
        # unsatisfiable schema
        self._tighter: list[tuple[str, str]] = []
        self._any: str | None = None
        self._flat_memo: dict[tuple[int, ...], tuple[Any, Any]] = {}  # (outline, *_key(node)): (node, merged or error)
        self._flattening: set[tuple[int, ...]] = set()  # the keys _flat is merging now
        self._keys: dict[int, tuple[Any, tuple[int, ...]]] = {}  # id(conjunction): (it, _key of it)
        self._proving = 0  # _disjoint_pair calls in progress
        self._types_memo: dict[int, tuple[dict, frozenset[str]]] = {}  # id(flat schema): (it, its types)
        self._merge_memo: dict[tuple, tuple[list, dict]] = {}  # (outline, *ids of the parts): (the parts, merged)
        # (_key(a), _key(b)) sorted: (disjoint, the depth it was decided at, a, b)
        self._disjoint_memo: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[bool, int, Any, Any]] = {}
        self._judge: Any = None  # the validator of enum values (see _valid)
        self.punct = {c: self._literal(name, c) for name, c in (
            ("LBRACE", "{"), ("RBRACE", "}"), ("LSQB", "["), ("RSQB", "]"), ("COMMA", ","), ("COLON", ":"),
        )}

    # ------------------------------------------------------------ naming --

    def _literal(self, name: str, text: str) -> str:
        t = Terminal.from_literal(name, text)
        self.terminals[name] = t
        self._term_by_regex[t.regex] = name
        return name

    def term(self, regex: str, hint: str, also: tuple[str, ...] = (), excluding: tuple[str, ...] = ()) -> str:
        """The terminal for ``regex`` (∩ ``also``, minus ``excluding``), shared by equal ones,
        with the data of the parts this compile wrote from data (:meth:`formed`)."""
        also = tuple(dict.fromkeys(r for r in also if r != regex))
        excluding = tuple(dict.fromkeys(excluding))
        key = regex if not (also or excluding) else (regex, also, excluding)
        name = self._term_by_regex.get(key)
        if name is None:
            name = self._term_name(hint)
            forms = tuple((r, self._forms[r]) for r in dict.fromkeys((regex, *also, *excluding)) if r in self._forms)
            self.terminals[name] = Terminal(name, regex, also=also, excluding=excluding, forms=forms)
            self._term_by_regex[key] = name
        return name

    def formed(self, text: str, form: Form) -> str:
        """``text``, written from ``form``'s data: a terminal with it as a part builds its
        DFA from the data (:class:`~toolkit.grammar.Terminal` ``forms``)."""
        if text != NOTHING:
            self._forms[text] = form
        return text

    def string_text(self, lo: int = 0, hi: int | None = None, pointer: str = "") -> str:
        """:func:`~toolkit.automata.jsontext.json_string` of the bounds, their data kept."""
        char = jsontext.char_of(jsontext.free_spelling(jsontext.SPELLING_VAR.get()))
        return self.formed(json_string(lo, hi, pointer=pointer), JsonStringForm(lo, hi, char))

    def value_text(self, value: str) -> str:
        """:func:`~toolkit.automata.jsontext.json_string_literal` of ``value``, the value kept."""
        return self.formed(json_string_literal(value), JsonKeysForm((value,)))

    def string_term(self, value: str, hint: str, *, key: bool = True) -> str:
        """:meth:`term` for the JSON texts of the string ``value`` (a key, or with
        ``key=False`` a string ``const``): the same terminal, with its DFA written down directly."""
        if not key and self.spelling != "json" and (self.spelling != "llguidance" or _CONTROL.search(value)):
            # a value with a character llguidance spells two ways (a control), or under x-guidance escapes
            return self.term(jsontext.spelled_literal(value, self.spelling), hint)
        if self.spelling != "json":  # the one text llguidance's compiler writes
            text = json.dumps(value, ensure_ascii=False)
            return self._term_by_regex.get(re.escape(text)) or self._literal(self._term_name(hint), text)
        regex = json_string_literal(value)
        name = self._term_by_regex.get(regex)
        if name is None:
            name = self._term_name(hint)
            self.terminals[name] = Terminal.from_json_string(name, value)
            self._term_by_regex[regex] = name
        return name

    def _term_name(self, hint: str) -> str:
        return f"{_term_base(hint)}_{len(self.terminals)}"

    def new_rule(self, hint: str) -> str:
        if len(self.rules) >= self.max_rules:
            raise _located(LimitExceeded("max_rules", len(self.rules) + 1, self.max_rules, "rules in the grammar"),
                           self._at)
        base = _rule_base(hint)
        # "start" is the grammar's start symbol alone; a property called "start" gets a number.
        name = "start" if hint == "" and "start" not in self.rules else f"{base}_{len(self.rules)}"
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
        if isinstance(node, dict) and ("$dynamicRef" in node or "$recursiveRef" in node):
            # the reference pass rewrites every one it can reach; one left (under a
            # keyword it does not walk) must not read as "any value"
            kw = "$dynamicRef" if "$dynamicRef" in node else "$recursiveRef"
            raise UnsupportedSchema(kw, f"{pointer}/{kw}", "a dynamic reference where it cannot be resolved")
        if node is True or (isinstance(node, dict) and not (set(node) & _VALIDATION)):
            return self.any_value()
        if node is False:
            key = "false"
            if key not in self._memo:
                self._memo[key] = self.new_rule("nothing")
            return self._memo[key]
        if not isinstance(node, dict):
            raise UnsupportedSchema("schema", pointer, f"a schema must be an object or a boolean, not {type(node).__name__}")
        _tick(pointer)
        # Memo by content: references are root-relative, so equal content is an equal
        # language, and recursion through merged subschemas reaches a fixed point.
        key = json.dumps(node, default=repr)
        if key in self._memo:
            return self._memo[key]
        outer, self._at = self._at, pointer
        name = self.new_rule("" if pointer == "" else pointer.rsplit("/", 1)[-1] or "r")
        self._memo[key] = name
        self._where[name] = (node, pointer)
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise _located(LimitExceeded("max_depth", self._depth, self.max_depth, "schemas nested"), pointer)
            self.rules[name] = self.alternatives(node, pointer)
        except RecursionError:
            # (a backstop: the nesting checks before the compile keep the default
            # limits far from Python's stack; a larger max_depth may not be)
            raise _located(LimitExceeded("max_depth", self._depth, self.max_depth,
                                         f"Python's stack ran out {self._depth} schemas deep"), pointer) from None
        except LimitExceeded as e:
            _located(e, pointer)
            raise
        finally:
            self._depth -= 1
            self._at = outer
        return name

    def alternatives(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        node = dict(node)
        if "$ref" in node:
            target, target_ptr = self.resolve(node.pop("$ref"), pointer + "/$ref")
            if self._ref_alone:  # drafts 3 to 7: the keywords beside a $ref are ignored
                node = {k: v for k, v in node.items() if k not in _VALIDATION}
            if not (set(node) & _VALIDATION):
                return [(self.compile(target, target_ptr),)]
            node = self.merge([target, node], pointer)
        if "allOf" in node:
            parts = node.pop("allOf")
            if not isinstance(parts, list):
                raise UnsupportedSchema("allOf", pointer, "allOf must be a list")
            node = self.merge(parts + [node], pointer + "/allOf")
            if "$ref" in node or "allOf" in node:
                return self.alternatives(node, pointer)
        if "if" in node:
            cond, then, other = node.pop("if"), node.pop("then", True), node.pop("else", True)
            for kw, sub in (("if", cond), ("then", then), ("else", other)):
                _check_schemas([sub], kw, f"{pointer}/{kw}", single=True)
            # (if and then) or (not if and else)
            node = self.merge([node, self._either(cond, then, other, pointer)], pointer)
            return self.alternatives(node, pointer)
        node.pop("then", None)  # without "if", then/else have no effect
        node.pop("else", None)
        if "not" in node:
            sub = node.pop("not")
            if sub is True or sub == {}:
                return []  # the empty schema (merge writes false so)
            try:
                negated = self.negate(sub, pointer + "/not")
            except UnsupportedSchema as e:
                self.unsupported(e.keyword, e.pointer, e.reason)
                negated = True
            node = self.merge([node, negated], pointer)
            return self.alternatives(node, pointer)
        deps = self._dependencies(node, pointer)
        if deps:
            node = self.merge([node, *deps], pointer)
            return self.alternatives(node, pointer)
        return self._body(node, pointer)

    def _dependencies(self, node: dict, pointer: str) -> list[dict]:
        """``dependencies``/``dependentRequired``/``dependentSchemas`` as anyOf parts
        (the property is absent, or present with what it needs); removes them from ``node``."""
        out = []
        for kw in ("dependencies", "dependentRequired", "dependentSchemas"):
            deps = node.pop(kw, None)
            if deps is None:
                continue
            if not isinstance(deps, dict):
                raise UnsupportedSchema(kw, f"{pointer}/{kw}", f"{kw} must be an object")
            for name, need in deps.items():
                absent = {"properties": {name: False}}
                if not isinstance(need, (list, dict, bool)):
                    raise UnsupportedSchema(kw, f"{pointer}/{kw}/{_escape_pointer(name)}",
                                            "must be a list of names or a schema")
                if isinstance(need, list):
                    if not need:
                        continue
                    present: Any = {"required": [name, *need]}
                elif kw == "dependentRequired":
                    raise UnsupportedSchema(kw, f"{pointer}/{kw}/{_escape_pointer(name)}", "must be a list")
                else:
                    present = {"allOf": [{"required": [name]}, need]}
                out.append({"anyOf": [absent, present]})
        return out

    # ---------------------------------------------------------- negation --

    def negate(self, node: Any, pointer: str, depth: int = 0) -> Any:
        """A schema accepting exactly the values ``node`` rejects, or UnsupportedSchema.

        A schema is the conjunction of its keywords, so its complement is the union of
        each keyword's violations, and a keyword only constrains its own type: the
        violations of ``maxLength: 3`` are the strings of 4 or more characters.
        Where a violation is not expressible exactly it is left out only if that is
        tighter (numbers: only canonical integers, see :data:`NOT_INTEGERS`; the
        non-integral numbers where ``enum`` lists one); otherwise ``not`` is unsupported.
        """
        if depth > 16:
            raise UnsupportedSchema("not", pointer, "negations nest too deeply")
        _tick(pointer)
        if node is True:
            return False
        if node is False:
            return True
        if not isinstance(node, dict):
            raise UnsupportedSchema("not", pointer, "a schema must be an object or a boolean")
        node = self.merge([node], pointer) if ("$ref" in node or "allOf" in node) else _draft4_bounds(dict(node))
        if node.get("not") == {} or node.get("not") is True:
            return True
        # (a keyword the draft lacks constrains nothing, so its complement takes nothing:
        # the draft's reading, exact, where the tighter one would loosen)
        keys = [k for k in node if k in _VALIDATION and k not in self._lacking]
        if not keys:
            return False
        branches: list[Any] = []
        types = set(self._types(node, pointer))
        for t in _TYPES:
            if t == "number":
                # With type integer, non-integral numbers violate it too: those written
                # without exponent (tighter: 1.5e0 is left out, as no regex tells the
                # integral values among exponent forms).
                if not types & {"number", "integer"}:
                    branches.append({"type": "number"})
                elif "number" not in types:
                    branches.append({"type": "number", FRACTIONAL: True})
                    self._tighter.append(("not", pointer))
            elif t != "integer" and t not in types:
                branches.append({"type": t})
        for k in keys:
            if k == "type":
                continue
            branches.extend(self._violations(k, node[k], node, f"{pointer}/{k}", depth))
        branches = [b for b in branches if b is not False]
        if any(b is True for b in branches):
            return True
        if not branches:
            return False
        if len(branches) > _MAX_BRANCHES:
            raise UnsupportedSchema("not", pointer, f"the negation has {len(branches)} alternatives")
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def _violations(self, k: str, v: Any, node: dict, pointer: str, depth: int) -> list[Any]:
        """The values that keyword ``k: v`` (of ``node``) rejects, as schemas."""
        def count(x: Any) -> int:
            return _count_of(k, x, pointer)

        if k in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"):
            n = count(v)
            t = {"L": "string", "I": "array", "P": "object"}[k[3]]
            other = ("max" if k.startswith("min") else "min") + k[3:]
            if k.startswith("min"):
                return [{"type": t, other: n - 1}] if n > 0 else []
            return [{"type": t, other: n + 1}]
        if k == "pattern":
            if not isinstance(v, str):
                raise UnsupportedSchema("pattern", pointer, "pattern must be a string")
            return [{"type": "string", NOT_STRINGS: [ecma_pattern(v, pointer=pointer)]}]
        if k == ALSO_STRINGS:
            return [{"type": "string", NOT_STRINGS: [r]} for r in v]
        if k == NOT_STRINGS:
            return [{"type": "string", ALSO_STRINGS: [r]} for r in v]
        if k == NOT_INTEGERS:
            return [{"enum": sorted({int(r) for r in v})}] if v else []
        if k == FRACTIONAL:
            return [{"type": "integer"}] if v is True else []
        if k == "format":
            if isinstance(v, str) and json_format(v, pointer=pointer) is None:
                return []  # an unknown format is an annotation
            self._tighter.append(("not", pointer))
            return []  # tighter: strings that violate the format are left out of the complement
        if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not _numbers(v):
                raise UnsupportedSchema(k, pointer, f"{k} must be a number")
            flip = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
                    "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}[k]
            return [{"type": "number", flip: v}]
        if k == "multipleOf":
            decimal_step(v, pointer=pointer)
            self._tighter.append(("not", pointer))  # non-multiples are written without exponent
            return [{"type": "number", NOT_MULTIPLES: [v]}]
        if k == NOT_MULTIPLES:
            return [{"type": "number", "multipleOf": m} for m in v]
        if k == "uniqueItems":
            if v is True:
                raise UnsupportedSchema("not", pointer, "arrays with a repeated item cannot be expressed")
            return []
        if k == "required":
            if not isinstance(v, list):
                raise UnsupportedSchema("required", pointer, "required must be a list")
            return [{"type": "object", "properties": {name: False}} for name in dict.fromkeys(v)]
        if k == "properties":
            if not isinstance(v, dict):
                raise UnsupportedSchema("properties", pointer, "properties must be an object")
            pats = node.get("patternProperties") or {}
            out = []
            for name, sub in v.items():
                text = json.dumps(name).encode()
                also = [s for p, s in pats.items()
                        if compile_regex(ecma_pattern(p, pointer=pointer)).fullmatch(text)]
                neg = self.negate({"allOf": [sub, *also]} if also else sub, f"{pointer}/{_escape_pointer(name)}",
                                  depth + 1)
                if neg is not False:
                    out.append({"type": "object", "required": [name], "properties": {name: neg}})
            return out
        if k in ("enum", "const"):
            values = v if k == "enum" else [v]
            if not isinstance(values, list):
                raise UnsupportedSchema("enum", pointer, "enum must be a list")
            return self._not_values(values, pointer)
        if k == "anyOf":
            if not isinstance(v, list) or not v:
                raise UnsupportedSchema("anyOf", pointer, "anyOf must be a non-empty list")
            parts = [self.negate(b, f"{pointer}/{i}", depth + 1) for i, b in enumerate(v)]
            return [{"allOf": parts}]
        if k == "oneOf":  # no branch matches, or two do
            if not isinstance(v, list) or not v:
                raise UnsupportedSchema("oneOf", pointer, "oneOf must be a non-empty list")
            parts = [self.negate(b, f"{pointer}/{i}", depth + 1) for i, b in enumerate(v)]
            out = [{"allOf": parts}]
            for i in range(len(v)):
                for j in range(i + 1, len(v)):
                    if not self._disjoint_pair(v[i], v[j]):
                        out.append({"allOf": [v[i], v[j]]})
            return out
        if k == "not":
            return [v]
        if k == "additionalProperties":
            neg = self.negate(v, pointer, depth + 1)
            if neg is False:
                return []
            props = node.get("properties", {})
            pats = list(node.get("patternProperties") or {})
            return [{"type": "object", "properties": {n: True for n in props},
                     "patternProperties": {p: True for p in pats},
                     SOME_ADDITIONAL: {"schema": neg, "names": list(props), "patterns": pats}}]
        if k == "items" and not isinstance(v, list):
            neg = self.negate(v, pointer, depth + 1)
            if "prefixItems" in node:
                raise UnsupportedSchema("not", pointer, "the complement of items after prefixItems")
            return [] if neg is False else [{"type": "array", "contains": neg}]
        if k == "contains":
            if "minContains" in node or "maxContains" in node:
                raise UnsupportedSchema("not", pointer, "the complement of counted contains")
            neg = self.negate(v, pointer, depth + 1)
            return [{"type": "array", "items": neg}]
        raise UnsupportedSchema("not", pointer, f"the complement of {k!r} cannot be expressed")

    def _not_values(self, values: list, pointer: str) -> list[Any]:
        """The values of no listed value, as schemas (their union).

        Scalars by type (excluded strings and canonical integers; a listed
        non-integral number takes every non-integral number along: tighter).  Arrays
        and objects exactly, by the first place where a value leaves every listed one
        (:meth:`_not_arrays`, :meth:`_not_objects`), up to :data:`_MAX_VALUE_NODES`
        nodes in the listed ones; past that the complement is unsupported."""
        self._tighter.append(("not", ""))
        _tick(pointer)
        strings = [x for x in values if isinstance(x, str)]
        ints = [x for x in values if _json_type(x) == "integer"]
        out: list[Any] = [
            {"type": "string", NOT_STRINGS: [self.value_text(x) for x in strings]},
            {"type": "integer", NOT_INTEGERS: [t for x in ints for t in _int_texts(x)]},
        ]
        for lit in (None, True, False):
            if not any(x is lit for x in values):
                out.append({"enum": [lit]})
        if not any(_json_type(x) == "number" for x in values):
            out.append({"type": "number", FRACTIONAL: True})
        arrays = [x for x in values if isinstance(x, list)]
        objects = [x for x in values if isinstance(x, dict)]
        size = sum(_value_nodes(x) for x in arrays + objects)
        if size > _MAX_VALUE_NODES:
            raise UnsupportedSchema("not", pointer, f"the complement of {len(arrays) + len(objects)} arrays and "
                                                    f"objects of {size} values in all (at most {_MAX_VALUE_NODES})")
        out.extend(self._not_arrays(arrays, [], pointer) if arrays else [{"type": "array"}])
        out.extend(self._not_objects(objects, pointer) if objects else [{"type": "object"}])
        return out

    def _not_arrays(self, arrays: list[list], prefix: list, pointer: str) -> list[Any]:
        """The arrays that start with ``prefix`` and are none of ``arrays`` (all of which
        start with it): those that end where no listed one does, and those whose next
        item is none of the listed ones' next items; then the same after each of those
        items.  The union is exact; the prefix items are matched as ``const`` (in their
        serialization, tighter)."""
        j = len(prefix)
        head: dict[str, Any] = {"prefixItems": [{"const": p} for p in prefix]} if prefix else {}
        out: list[Any] = []
        if not any(len(a) == j for a in arrays):
            out.append({"type": "array", "minItems": j, "maxItems": j, **head})
        longer = [a for a in arrays if len(a) > j]
        if not longer:
            out.append({"type": "array", "minItems": j + 1, **head})
            return out
        groups = _group_by_value([(a[j], a) for a in longer])
        nxt = {"anyOf": self._not_values([v for v, _ in groups], pointer)}
        out.append({"type": "array", "minItems": j + 1, "prefixItems": [*head.get("prefixItems", []), nxt]})
        for v, members in groups:
            out.extend(self._not_arrays(members, [*prefix, v], pointer))
        return out

    def _not_objects(self, objects: list[dict], pointer: str) -> list[Any]:
        """The objects that are none of ``objects``: those with a name none of them has,
        and those that leave them at a listed name (absent where every one with the
        names before it has it, present where none has it, or a value none has).
        The union is exact; the values before that name are matched as ``const``
        (in their serialization, tighter)."""
        names = list(dict.fromkeys(k for o in objects for k in o))
        out: list[Any] = [{"type": "object", "properties": {n: True for n in names},
                           SOME_ADDITIONAL: {"schema": True, "names": names, "patterns": []}}]

        def leave(objs: list[dict], j: int, props: dict, required: list) -> None:
            if j == len(names):
                return  # every listed name as one of them: one of them (no other name)
            name = names[j]
            having = [o for o in objs if name in o]
            lacking = [o for o in objs if name not in o]
            if not lacking:
                out.append({"type": "object", "properties": {**props, name: False}, **_req(required)})
            if not having:
                out.append({"type": "object", "properties": props, **_req([*required, name])})
            else:
                groups = _group_by_value([(o[name], o) for o in having])
                nxt = {"anyOf": self._not_values([v for v, _ in groups], pointer)}
                out.append({"type": "object", "properties": {**props, name: nxt}, **_req([*required, name])})
                for v, members in groups:
                    leave(members, j + 1, {**props, name: {"const": v}}, [*required, name])
            if lacking:
                leave(lacking, j + 1, {**props, name: False}, required)

        leave(objects, 0, {}, [])
        return out

    def _body(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        for kw in ("anyOf", "oneOf"):
            if kw in node:
                branches = node[kw]
                if not isinstance(branches, list) or not branches:
                    raise UnsupportedSchema(kw, pointer, f"{kw} must be a non-empty list")
                _check_schemas(branches, kw, f"{pointer}/{kw}")
                rest = {k: v for k, v in node.items() if k != kw}
                if set(rest) & _VALIDATION:
                    merged = [self.merge([rest, b], f"{pointer}/{kw}/{i}") for i, b in enumerate(branches)]
                else:
                    merged = branches
                if kw == "oneOf" and not self._disjoint(merged):
                    merged = self._exclusive(merged, pointer)
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

    def merge(self, parts: list[Any], pointer: str, depth: int = 0, *, outline: bool = False) -> dict:
        """allOf: one schema accepting exactly what every part accepts, or UnsupportedSchema.

        Kept per parts (their identities, less those with only annotations, which add
        nothing): a definition that many properties reference, each with its own
        ``description`` beside the ``$ref``, is merged once.  (A new dict each call:
        callers may change it.)

        ``outline=True``: a schema accepting *at least* what every part accepts, for
        reading only (:meth:`_disjoint_pair`, :meth:`_finite_values`: a proof of "no
        value" or "only these values" about it holds for the parts), in time linear in
        the parts: the anyOf and oneOf lists are kept side by side under
        :data:`_ANY_LISTS` instead of multiplied out, and what would need more
        (if/then/else, two keywords that do not merge) is left out."""
        relevant = [p for p in parts if not isinstance(p, dict) or not _annotations_only(p)]
        key = (outline, *map(id, relevant))
        hit = self._merge_memo.get(key)
        if hit is not None:
            return dict(hit[1])
        out = self._merge(parts, pointer, depth, outline)
        self._merge_memo[key] = (relevant, out)
        return dict(out)

    def _merge(self, parts: list[Any], pointer: str, depth: int, outline: bool) -> dict:
        """:meth:`merge`, not kept."""
        if depth > 32:
            raise UnsupportedSchema("allOf", pointer, "references nest too deeply to merge")
        flat: list[dict] = []
        lists: list[list] = []  # (outline) the anyOf and oneOf lists of the parts
        for i, part in enumerate(parts):
            _tick(pointer or self._at)
            if isinstance(part, dict) and _annotations_only(part):
                continue
            if part is True:
                continue
            if part is False:
                return {"not": {}}
            if not isinstance(part, dict):
                raise UnsupportedSchema("allOf", f"{pointer}/{i}", "a schema must be an object or a boolean")
            part = _draft4_bounds(dict(part))
            if "$ref" in part:
                target, _ = self.resolve(part.pop("$ref"), f"{pointer}/{i}/$ref")
                if self._ref_alone:  # drafts 3 to 7: the keywords beside a $ref are ignored
                    part = {k: v for k, v in part.items() if k not in _VALIDATION}
                part = self.merge([target, part], f"{pointer}/{i}", depth + 1, outline=outline)
            if "allOf" in part:
                inner = part.pop("allOf")
                if not isinstance(inner, list):
                    raise UnsupportedSchema("allOf", f"{pointer}/{i}/allOf", "allOf must be a list")
                part = self.merge(inner + [part], f"{pointer}/{i}/allOf", depth + 1, outline=outline)
            if outline:
                lists.extend(part.pop(_ANY_LISTS, []))
                for kw in ("anyOf", "oneOf"):
                    branches = part.pop(kw, None)
                    if isinstance(branches, list) and branches:
                        lists.append(branches)
                for kw in ("if", "then", "else"):
                    part.pop(kw, None)
            flat.append(part)
        if len(flat) > 1 and any(k in p for p in flat for k in ("if", "then", "else")):
            # if/then/else speak only to each other in one schema object: each part's
            # becomes (if and then) or (not if and else), as alternatives() writes one
            # (their anyOf lists multiply out below), and a then or else with no if
            # beside it is nothing (merged, it would meet another part's if)
            flat = [self._unconditional(p, f"{pointer}/{i}", depth) if "if" in p
                    else {k: v for k, v in p.items() if k not in ("then", "else")} for i, p in enumerate(flat)]
        if sum(isinstance(p.get("anyOf"), list) for p in flat) > 1:
            # their anyOf lists multiply out below: first each loses what the other parts rule out
            for i, part in enumerate(flat):
                if isinstance(part.get("anyOf"), list):
                    kept = self._in_context(part["anyOf"], [q for j, q in enumerate(flat) if j != i])
                    if not kept:
                        return {"not": {}}
                    flat[i] = {**part, "anyOf": kept}
        out: dict[str, Any] = {}
        dropped: set[str] = set()  # (outline) keywords left out
        for i, part in enumerate(flat):
            for k, v in part.items():
                if k not in _VALIDATION:
                    out.setdefault(k, v)
                elif k in dropped:
                    continue
                elif k not in out:
                    out[k] = list(v) if k in _INTERNAL else v
                elif k == "pattern" and out[k] != v:
                    # Two patterns: the string must match both.
                    if not isinstance(v, str):
                        raise UnsupportedSchema("pattern", f"{pointer}/{i}/pattern", "pattern must be a string")
                    extra = ecma_pattern(v, pointer=f"{pointer}/{i}/pattern")
                    out[ALSO_STRINGS] = [*out.get(ALSO_STRINGS, []), extra]
                else:
                    try:
                        out[k] = self._merge_keyword(k, out[k], v, f"{pointer}/{i}/{k}")
                    except _NoValue:
                        return {"not": {}}
                    except UnsupportedSchema:
                        if not outline:
                            raise
                        # (outline: without the keyword, and those that read it, the
                        # schema says less, never more; properties say what they say alone)
                        group = next((g for g in _OUTLINE_GROUPS if k in g), (k,))
                        dropped.update(group)
                        for x in group:
                            out.pop(x, None)
        if lists:
            out[_ANY_LISTS] = lists
        # items speaks of the positions after its own part's prefix: with prefixes in
        # several parts (or a prefix in one and items in another), each position gets
        # every part's schema for it
        positional = [p for p in flat if any(k in p for k in ("items", "prefixItems", "additionalItems"))]
        if len(positional) > 1 and any("prefixItems" in p or isinstance(p.get("items"), list) for p in positional):
            for k in ("items", "prefixItems", "additionalItems"):
                out.pop(k, None)
            out.update(_merge_positions(positional))
        # additionalProperties speaks of its own part's properties: a name another part
        # lists is additional to this part, so its value must satisfy this part's
        # additionalProperties too (false: the name may not appear).
        pats = [p.get("patternProperties") for p in flat if p.get("patternProperties")]
        restrictive = [(i, p) for i, p in enumerate(flat) if p.get("additionalProperties", True) is not True]
        same_patterns = all(x == pats[0] for x in pats)
        for i, part in restrictive:
            if not pats or (same_patterns and part.get("patternProperties") == pats[0]) or outline:
                continue
            if part.get("patternProperties") or part.get("properties"):
                raise UnsupportedSchema("allOf", f"{pointer}/{i}/additionalProperties",
                                        "additionalProperties next to patternProperties of another subschema")
            # a part that lists no key: every key is additional to it, so every pattern's value takes its
            # additionalProperties too (the names of other parts take it below)
            extra = part["additionalProperties"]
            out["patternProperties"] = {p: {"allOf": [s, extra]} for p, s in out["patternProperties"].items()}
        if restrictive and isinstance(out.get("properties", {}), dict):
            props = dict(out.get("properties", {}))
            for i, part in restrictive:
                own = part.get("properties", {})
                matchers = [compile_regex(ecma_pattern(p, pointer=f"{pointer}/{i}/patternProperties"))
                            for p in part.get("patternProperties") or {}]
                for name in props:
                    if name in own or any(m.fullmatch(json.dumps(name).encode()) for m in matchers):
                        continue
                    extra = part["additionalProperties"]
                    props[name] = extra if props[name] is True else {"allOf": [props[name], extra]}
            if props:
                out["properties"] = props
        return out

    def _unconditional(self, part: dict, pointer: str, depth: int) -> dict:
        """``part`` with its ``if``/``then``/``else`` written as an ``anyOf``."""
        part = dict(part)
        cond, then, other = part.pop("if"), part.pop("then", True), part.pop("else", True)
        for kw, sub in (("if", cond), ("then", then), ("else", other)):
            _check_schemas([sub], kw, f"{pointer}/{kw}", single=True)
        return self.merge([part, self._either(cond, then, other, pointer)], pointer, depth + 1)

    def _either(self, cond: Any, then: Any, other: Any, pointer: str) -> dict:
        """``if``/``then``/``else`` as ``(if and then) or (not if and else)``, the
        complement of ``if`` written out (:meth:`negate`) where it can be, so that the
        anyOf products and :meth:`_disjoint_pair` see what it rules out (``not`` is
        opaque to them); where it cannot, ``{"not": if}``, negated (or refused) where
        it is compiled, as before."""
        try:
            neg = self.negate(cond, f"{pointer}/if")
        except UnsupportedSchema:
            neg = {"not": cond}
        return {"anyOf": [{"allOf": [cond, then]}, {"allOf": [neg, other]}]}

    def _merge_keyword(self, k: str, a: Any, b: Any, pointer: str) -> Any:
        if _json_same(a, b):  # (Python's == takes True for 1 and [1] for [True])
            return a
        if k == "const":
            raise _NoValue  # two different values: nothing matches both
        if k == "type":
            ta = set(a if isinstance(a, list) else [a])
            tb = set(b if isinstance(b, list) else [b])
            both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or ("number" in ta and "integer" in tb) else set())
            return [t for t in _TYPES if t in both]
        if k == "required":
            return list(dict.fromkeys(list(a) + list(b)))
        if k in ("properties", "patternProperties") and isinstance(a, dict) and isinstance(b, dict):
            # a key (matching a pattern) takes the schema of every part that lists it (every pattern it matches)
            merged = dict(a)
            for name, s in b.items():
                merged[name] = {"allOf": [merged[name], s]} if name in merged else s
            return merged
        if k in ("minLength", "minItems", "exclusiveMinimum") and _numbers(a, b):
            return max(a, b)
        if k in ("maxLength", "maxItems", "exclusiveMaximum") and _numbers(a, b):
            return min(a, b)
        if k in _INTERNAL:
            return list(a) + [x for x in b if x not in a]
        if k == "multipleOf":
            return _lcm_step(a, b, pointer)
        if k in ("minimum", "minProperties") and _numbers(a, b):
            return max(a, b)
        if k in ("maximum", "maxProperties") and _numbers(a, b):
            return min(a, b)
        if k == "not":
            return {"anyOf": [a, b]}  # not A and not B
        if k in ("items", "additionalItems", "propertyNames", "additionalProperties") and \
                not isinstance(a, list) and not isinstance(b, list):
            return {"allOf": [a, b]}
        if k == "anyOf" and isinstance(a, list) and isinstance(b, list):
            return self._any_of_product(a, b, pointer)
        if k in ("anyOf", "oneOf"):
            raise UnsupportedSchema(k, pointer, f"allOf of two {k} lists")
        if k == "enum" and isinstance(a, list) and isinstance(b, list):
            keep = {json.dumps(x, sort_keys=True) for x in b}
            return [x for x in a if json.dumps(x, sort_keys=True) in keep]
        raise UnsupportedSchema("allOf", pointer, f"cannot merge two different {k!r} keywords exactly")

    def _in_context(self, branches: list, others: list[dict]) -> list:
        """anyOf ``branches`` conjoined with every schema in ``others``: less those no
        value of ``others`` can match (:meth:`_disjoint_pair`), and "property n
        present, with a value in N" as "n present" where another schema gives n
        finitely many values, all in N (the shape :meth:`_violations` writes for
        ``properties``).  The conjunction with ``others`` is the same."""
        out = []
        for b in branches:
            _tick(self._at)
            if any(self._disjoint_pair(b, o) for o in others):
                continue
            if isinstance(b, dict) and isinstance(b.get(SOME_ADDITIONAL), dict):
                closed = next((o for o in others if o.get("additionalProperties") is False
                               and not o.get("patternProperties") and isinstance(o.get("properties", {}), dict)), None)
                if closed is not None:
                    out.extend(self._witnesses(b, closed))
                    continue
            if isinstance(b, dict) and set(b) <= {"type", "required", "properties"} and b.get("type") == "object" \
                    and isinstance(b.get("properties"), dict) and len(b["properties"]) == 1 \
                    and b.get("required") == list(b["properties"]):
                (name, need), = b["properties"].items()
                if need is not True and any(self._pinned_within(o, name, need) for o in others):
                    b = {"type": "object", "required": [name]}
            out.append(b)
        return out

    def _witnesses(self, branch: dict, closed: dict) -> list[dict]:
        """``branch`` (some additional member matches a schema) next to a ``closed``
        object schema: one branch per name the closed one allows that would be
        additional to ``branch``, that member required and matching the schema.
        The properties ``branch`` lists as true say nothing once the witness is named,
        and go."""
        some = branch[SOME_ADDITIONAL]
        matchers = [compile_regex(ecma_pattern(p)) for p in some["patterns"]]
        rest = {k: v for k, v in branch.items() if k not in (SOME_ADDITIONAL, "patternProperties", "properties")}
        props = {n: v for n, v in (branch.get("properties") or {}).items() if v is not True}
        if any(v is not True for v in (branch.get("patternProperties") or {}).values()):
            rest["patternProperties"] = branch["patternProperties"]
        out = []
        for name, sub in closed.get("properties", {}).items():
            if sub is False or name in some["names"] or any(m.fullmatch(json.dumps(name).encode()) for m in matchers):
                continue
            need = some["schema"] if name not in props else _all_of([props[name], some["schema"]])
            own = {**props, name: need} if need is not True else props
            req = list(dict.fromkeys([*rest.get("required", []), name]))
            out.append({**rest, "required": req, **({"properties": own} if own else {})})
        return out

    def _pinned_within(self, other: dict, name: str, need: Any) -> bool:
        """``other`` gives property ``name`` finitely many values, each of which ``need`` takes."""
        props = other.get("properties")
        sub = props.get(name, True) if isinstance(props, dict) else True
        if sub is True or not isinstance(need, (dict, bool)):
            return False
        try:
            values = self._finite_values(sub, "")
            if values is None:
                return False
            return all(need is True or (need is not False and self._valid(v, need, ""))
                       for v in values if sub is not False and self._valid(v, sub, ""))
        except UnsupportedSchema:
            return False

    def _any_of_product(self, a: list, b: list, pointer: str) -> list:
        """(a1 or a2) and (b1 or b2): the pairwise conjunctions, less those that add
        nothing: a pair provably apart (:meth:`_disjoint_pair`: no value), a pair of
        the same conjuncts as another, and one whose conjuncts include all of
        another's (it takes a part of what that one takes).  The union is the same.
        Unsupported past :data:`_MAX_PRODUCT` conjunctions left, or
        :data:`_MAX_PAIRS` pairs to look at."""
        if len(a) * len(b) > _MAX_PAIRS:
            raise UnsupportedSchema("anyOf", pointer, f"allOf of two anyOf lists has {len(a) * len(b)} combinations")
        combos: dict[frozenset, list] = {}
        keyed = {id(x): (x, {json.dumps(c, default=repr): c for c in _conjuncts(x) if c is not True}) for x in (*a, *b)}
        for x in a:
            _tick(pointer)
            for y in b:
                parts = {**keyed[id(x)][1], **keyed[id(y)][1]}
                key = frozenset(parts)
                if key in combos:
                    continue
                if any(c is False for c in parts.values()) or self._disjoint_pair(x, y):
                    continue
                combos[key] = list(parts.values())

        def implied(key: frozenset) -> bool:  # some other conjunction has a part of these conjuncts
            if len(key) > 8:
                return False
            return any(frozenset(sub) in combos for n in range(1, len(key)) for sub in itertools.combinations(key, n))

        kept = [parts for key, parts in combos.items() if not implied(key)]
        if len(kept) > _MAX_PRODUCT:
            raise UnsupportedSchema("anyOf", pointer, f"allOf of two anyOf lists has {len(kept)} combinations "
                                                      f"(of {len(a) * len(b)}) that may take a value")
        return [parts[0] if len(parts) == 1 else {"allOf": parts} for parts in kept] or [False]

    def _exclusive(self, branches: list[Any], pointer: str) -> list[Any]:
        """oneOf as a union: each branch minus every other branch it may overlap
        (exact when those can be negated; otherwise ``oneOf`` is unsupported)."""
        n = len(branches)
        overlaps = {(i, j) for i in range(n) for j in range(n) if i != j and not self._disjoint_pair(branches[i], branches[j])}
        if len(overlaps) > _MAX_BRANCHES:
            self.unsupported("oneOf", pointer, f"{n} overlapping branches")
            return branches
        extra: dict[int, list] = {i: [] for i in range(n)}
        for (i, j) in sorted(overlaps):
            _tick(f"{pointer}/oneOf/{i}")
            try:
                bi, bj = self._flat(branches[i]), self._flat(branches[j])
                flat = isinstance(bi, dict) and isinstance(bj, dict)
            except UnsupportedSchema:
                bi, bj, flat = branches[i], branches[j], False
            # (a) overlap only in types that branch j accepts whole: drop them from i
            if flat:
                try:
                    ti, tj = set(self._types(bi, "")), set(self._types(bj, ""))
                except UnsupportedSchema:
                    ti = tj = set()
                ti |= {"integer"} if "number" in ti else set()
                tj |= {"integer"} if "number" in tj else set()
                common = {t for t in ti & tj
                          if not self._disjoint_in_type(t, bi, bj, 0)}
                if common and all(_covers_type(bj, t) for t in common):
                    keep = [t for t in self._types(bi, "") if t not in common]
                    extra[i].append({"type": keep} if keep else False)
                    continue
            # (b) i and not j is i and not (j without the keywords i has verbatim): i
            # implies those (on the merged forms, where $ref and allOf are resolved)
            red = _reduce_against(bj, bi) if flat else branches[j]
            try:
                extra[i].append(self.negate(red, f"{pointer}/oneOf/{j}"))
            except UnsupportedSchema as e:
                self.unsupported("oneOf", pointer,
                                 f"branches may overlap, and the complement of one is not expressible ({e.reason})")
                return branches
        return [{"allOf": [b] + extra[i]} for i, b in enumerate(branches)]

    def _disjoint(self, branches: list[Any]) -> bool:
        """True when no JSON value can match two of the (merged) oneOf branches."""
        return all(self._disjoint_pair(a, b) for i, a in enumerate(branches) for b in branches[i + 1:])

    def _key(self, node: Any) -> tuple[int, ...]:
        """Who ``node`` is to the memos of :meth:`_flat` and :meth:`_disjoint_pair`: a
        bare conjunction ``{"allOf": [...]}`` (what anyOf products and merged
        ``properties`` write, a new object each time for the same conjuncts) by the
        identities of its conjuncts, anything else by its own identity.  (The memos
        hold the objects, so no identity is reused while they are kept.)"""
        if isinstance(node, dict) and len(node) == 1 and isinstance(node.get("allOf"), list):
            hit = self._keys.get(id(node))
            if hit is None:  # (kept with the node, so that its id stays its own)
                hit = self._keys[id(node)] = (node, tuple(id(c) for c in _conjuncts(node)))
            return hit[1]
        return (id(node),)

    def _flat(self, node: Any, outline: bool = False, key: tuple[int, ...] | None = None) -> Any:
        """``node`` merged (its ``$ref`` and ``allOf`` resolved), for reading only:
        kept per node (:meth:`_key`), a merge that is unsupported too.  ``outline``:
        merged with :meth:`merge`'s ``outline`` (at least the node's values, cheap).
        ``key``: the node's :meth:`_key`, where the caller has it.

        A merge reads disjointness (:meth:`_in_context`), which flattens other nodes:
        a node met again while it is being flattened (recursion through references),
        or flattening nested :data:`_MAX_FLAT_NESTING` deep, is :class:`_Undecided`,
        which the readers take as "maybe" (never a proof: see :meth:`_disjoint_pair`)."""
        if not isinstance(node, dict):
            return node
        key = (outline, *(self._key(node) if key is None else key))
        hit = self._flat_memo.get(key)
        if hit is not None:
            if isinstance(hit[1], UnsupportedSchema):
                raise hit[1]
            return hit[1]
        if key in self._flattening or len(self._flattening) >= _MAX_FLAT_NESTING:
            raise _Undecided("allOf", "", "met again while merging it (recursion), or merges nested too deeply")
        if "$ref" in node or "allOf" in node:
            self._flattening.add(key)
            try:
                flat: Any = self.merge([node], "", outline=outline)
            except _Undecided:
                raise
            except UnsupportedSchema as e:
                self._flat_memo[key] = (node, e)
                raise
            finally:
                self._flattening.discard(key)
        else:
            flat = _draft4_bounds(dict(node))
        if self._lacking and isinstance(flat, dict) and not self._lacking.isdisjoint(flat):
            flat = {k: v for k, v in flat.items() if k not in self._lacking}  # (as the draft reads it: a proof holds there)
        self._flat_memo[key] = (node, flat)
        return flat

    def _disjoint_pair(self, a: Any, b: Any, depth: int = 0) -> bool:
        """True when provably no value matches both ``a`` and ``b`` (False: maybe).

        Only True is ever used as a fact (a branch or conjunction dropped as empty,
        oneOf branches taken as exclusive), so every cut here (the depth, a node met
        again while merging it: :class:`_Undecided`) answers False: exact, never
        looser.  Kept per pair of nodes (:meth:`_key`; anyOf products ask the same
        pairs again), with the depth it was decided at: a proof holds at any depth, a
        "maybe" only where no more depth is left than it had."""
        if depth > 8:
            return False
        ka, kb = self._key(a), self._key(b)
        key = (ka, kb) if ka <= kb else (kb, ka)
        hit = self._disjoint_memo.get(key)
        if hit is not None and (hit[0] or hit[1] <= depth):
            return hit[0]
        if self._proving >= _MAX_PROOF_NESTING:  # (depth restarts in each merge _flat makes: this bounds the stack)
            return False
        self._proving += 1
        try:
            result = self._disjoint_pair_uncached(a, b, depth, ka, kb)
        finally:
            self._proving -= 1
        self._disjoint_memo[key] = (result, depth, a, b)
        return result

    def _disjoint_pair_uncached(self, a: Any, b: Any, depth: int, ka: tuple[int, ...], kb: tuple[int, ...]) -> bool:
        try:
            a, b = self._flat(a, True, ka), self._flat(b, True, kb)
        except UnsupportedSchema:
            return False
        if a is False or b is False:
            return True
        if a is True or b is True:
            return False
        for x in (a, b):
            if x.get("not") == {} or x.get("not") is True:
                return True
        try:
            ta, tb = self._read_types(a), self._read_types(b)
        except UnsupportedSchema:
            return False
        if not ta & tb:  # (the cheapest proof first)
            return True
        for x, y in ((a, b), (b, a)):
            if "enum" in x or "const" in x:
                values = x["enum"] if "enum" in x else [x["const"]]
                if not isinstance(values, list):
                    return False
                if self._lacking:  # (the judge reads dependentRequired & co. in every draft: tighter)
                    y = _strip_keywords(y, tuple(self._lacking))
                try:
                    return not any(self._valid(v, y, "") for v in values)
                except UnsupportedSchema:
                    return False
        for x, y in ((a, b), (b, a)):
            for branches in _branch_lists(x):
                _tick(self._at)
                if all(self._disjoint_pair(br, y, depth + 1) for br in branches):
                    return True
        return all(self._disjoint_in_type(t, a, b, depth) for t in ta & tb)

    def _read_types(self, flat: dict) -> frozenset[str]:
        """The types a flat (or outline) schema allows, integer with number; kept per
        flat schema (they are kept by :meth:`_flat`, so their ids stay their own)."""
        hit = self._types_memo.get(id(flat))
        if hit is None:
            types = set(self._types(flat, ""))
            if "number" in types:
                types.add("integer")
            hit = self._types_memo[id(flat)] = (flat, frozenset(types))
        return hit[1]

    def _disjoint_in_type(self, t: str, a: dict, b: dict, depth: int) -> bool:
        if t == "object":
            for x, y in ((a, b), (b, a)):
                req = x.get("required", [])
                if isinstance(req, list) and any(_forbids(y, name) for name in req):
                    return True
            pa, pb = a.get("properties", {}), b.get("properties", {})
            if isinstance(pa, dict) and isinstance(pb, dict):
                ra, rb = a.get("required", []), b.get("required", [])
                either = (set(ra) if isinstance(ra, list) else set()) | (set(rb) if isinstance(rb, list) else set())
                for name in either & set(pa) & set(pb):
                    if self._disjoint_pair(pa[name], pb[name], depth + 1):
                        return True
            def least(x: dict) -> dict:
                r = x.get("required", [])
                n = len(set(r)) if isinstance(r, list) else 0
                m = x.get("minProperties", 0)
                return {**x, "minProperties": max(m, n)} if _numbers(m) and n > m else x
            return _ranges_apart(least(a), least(b), "minProperties", "maxProperties")
        if t == "array":
            return _ranges_apart(a, b, "minItems", "maxItems")
        if t in ("number", "integer"):
            la, ha = _bounds(a)
            lb, hb = _bounds(b)
            return _before(ha, lb) or _before(hb, la)
        if t == "string":
            if not (set(a) & set(_STRING_KW)) or not (set(b) & set(_STRING_KW)):
                return False
            try:
                da = compile_boolean(*self.string_spec(a, ""))
                db = compile_boolean(*self.string_spec(b, ""))
                return disjoint(da, db)
            except TimeLimitExceeded:
                raise
            except (UnsupportedSchema, LimitExceeded):
                return False
        return False

    # -------------------------------------------------------------- enum --

    def _enum(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        if "enum" in node:
            values = node["enum"]
            if not isinstance(values, list):
                raise UnsupportedSchema("enum", pointer + "/enum", "enum must be a list")
            if "const" in node:
                values = [v for v in values if _json_same(v, node["const"]) and type(v) is type(node["const"])]
        else:
            values = [node["const"]]
        rest = {k: v for k, v in node.items() if k in _VALIDATION and k not in ("enum", "const")}
        if set(rest) & {*_INTERNAL, FRACTIONAL, SOME_ADDITIONAL} or "const" in node and "enum" in node:
            self._tighter.append(("enum" if "enum" in node else "const", pointer))
        if rest:
            values = [v for v in values if self._valid(v, rest, pointer)]
        alts = []
        seen = set()
        for i, v in enumerate(values):
            if not i & 255:
                _tick(pointer)
            key = json.dumps(v, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            alts.append((self.value_literal(v),))
        return alts

    def _valid(self, value: Any, schema: dict, pointer: str) -> bool:
        """Does ``value`` satisfy ``schema`` (enum siblings)?  Decided by jsonschema,
        taught this compiler's reading of the schemas it writes (see :func:`_judge`):
        the internal keywords, positions and bounds in every draft, references
        resolved in the root."""
        if not schema:
            return True
        if set(schema) <= {"type"}:
            types = set(schema["type"] if isinstance(schema["type"], list) else [schema["type"]])
            jt = _json_type(value)
            return jt in types or (jt == "integer" and "number" in types)
        try:
            if self._judge is None:
                self._judge = _judge(self.root if isinstance(self.root, dict) else {})
            return self._judge.evolve(schema=schema).is_valid(value)
        except TimeLimitExceeded:
            raise
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
            return self.string_term(v, "STR", key=False)
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
                seq += [self.string_term(k, "KEY"), self.punct[":"], self.value_literal(x)]
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
        steps: list[str] = []
        if "multipleOf" in node:
            where = f"{pointer}/multipleOf"
            if not (integer and decimal_step(node["multipleOf"], pointer=where) == (1, 0)):
                steps.append(multiple_of(node["multipleOf"], integer=integer, pointer=where))
                self._tighter.append(("multipleOf", where))  # written without exponent
        for m in node.get(NOT_MULTIPLES, ()):
            steps.append(multiple_of(m, integer=integer, negate=True, pointer=pointer))
        excluding = tuple(node.get(NOT_INTEGERS, ()))
        if node.get(FRACTIONAL) is True:
            if integer:
                return self.term(NOTHING, "NOTHING")
            regex = NUMBER if lo is None and hi is None else number_range(
                lo, hi, lo_exclusive=lo_x, hi_exclusive=hi_x, integer=False)
            return self.term(regex, "NUMBER", also=(_FRACTION, *steps))
        if excluding and not integer:
            # Only canonical integer texts are excluded: a number type would still
            # match 2.0 or 2e0 for an excluded 2.
            self.unsupported("not", pointer, "excluding values from non-integer numbers")
            excluding = ()
        if lo is None and hi is None:
            return self.term(INTEGER if integer else NUMBER, "INT" if integer else "NUMBER", also=tuple(steps),
                             excluding=excluding)
        regex = number_range(lo, hi, lo_exclusive=lo_x, hi_exclusive=hi_x, integer=integer)
        return self.term(regex, "INT" if integer else "NUMBER", also=tuple(steps), excluding=excluding)

    def _string(self, node: dict, pointer: str) -> str:
        regex, also, excluding = self.string_spec(node, pointer)
        name = self.term(regex, "STRING", also, excluding)
        try:
            self.terminals[name].dfa()
        except TimeLimitExceeded:
            raise
        except LimitExceeded as e:
            kw = next((k for k in ("maxLength", "minLength", "pattern", "format") if k in node), "type")
            raise UnsupportedSchema(kw, f"{pointer}/{kw}" if kw != "type" else pointer,
                                    f"the string's automaton is too large ({e})") from e
        return name

    def string_spec(self, node: dict, pointer: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """The string keywords of ``node`` as (regex, also, excluding) of JSON string text.

        Every constraint is one regex (length, each pattern, the format); the first is
        the terminal's regex and the others are intersected with it (see
        :class:`~toolkit.grammar.Terminal`), so ``maxLength`` with ``pattern`` is exact.
        """
        lo = _count_of("minLength", node.get("minLength", 0), f"{pointer}/minLength")
        hi = node.get("maxLength")
        hi = None if hi is None else _count_of("maxLength", hi, f"{pointer}/maxLength")
        parts: list[str] = []
        pattern = node.get("pattern")
        if pattern is not None:
            if not isinstance(pattern, str):
                raise UnsupportedSchema("pattern", pointer + "/pattern", "pattern must be a string")
            parts.append(ecma_pattern(pattern, pointer=pointer + "/pattern"))
        parts.extend(node.get(ALSO_STRINGS, ()))
        fmt = node.get("format")
        if isinstance(fmt, str):
            fmt_regex = json_format(fmt, pointer=pointer + "/format")
            if fmt_regex is not None:
                parts.append(fmt_regex)
        if lo or hi is not None or not parts:
            parts.insert(0, self.string_text(lo, hi, pointer))
        return parts[0], tuple(parts[1:]), tuple(node.get(NOT_STRINGS, ()))

    def _object(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        """Listed properties in order (optional ones may be skipped), then any number
        of other members: keys matching ``patternProperties`` (their schemas), and
        additional keys (``additionalProperties``, written without escapes).  The
        member count is tracked up to the bound for ``minProperties``/``maxProperties``.
        """
        props = node.get("properties", {})
        if not isinstance(props, dict):
            raise UnsupportedSchema("properties", pointer + "/properties", "properties must be an object")
        props = dict(props)
        required = node.get("required", [])
        if not isinstance(required, list):
            raise UnsupportedSchema("required", pointer + "/required", "required must be a list")
        if "unevaluatedProperties" in node:
            self.unsupported("unevaluatedProperties", f"{pointer}/unevaluatedProperties", "not expressible by this compiler")
        lo = _count_of("minProperties", node.get("minProperties", 0), f"{pointer}/minProperties")
        hi = node.get("maxProperties")
        hi = None if hi is None else _count_of("maxProperties", hi, f"{pointer}/maxProperties")
        if hi is not None and hi < lo:
            return []
        additional = node.get("additionalProperties", True)
        patterns = node.get("patternProperties") or {}
        if not isinstance(patterns, dict):
            raise UnsupportedSchema("patternProperties", pointer + "/patternProperties", "must be an object")
        if additional is False and not patterns and SOME_ADDITIONAL not in node:
            # A closed object has at most its listed (and required) names.
            most = len(set(props) | set(required))
            if lo > most:
                return []
            if hi is not None and hi >= most:
                hi = None
        pat_rx = {p: ecma_pattern(p, pointer=f"{pointer}/patternProperties/{_escape_pointer(p)}") for p in patterns}
        names_schema = node.get("propertyNames", True)
        key_spec = self._key_spec(names_schema, pointer + "/propertyNames")
        # A listed or required name is validated by every schema that applies to it.
        for r in required:
            if r not in props:
                props[r] = True if any(compile_regex(rx).fullmatch(json.dumps(r).encode()) for rx in pat_rx.values()) \
                    else additional
        for name in list(props):
            text = json.dumps(name).encode()
            extra = [patterns[p] for p, rx in pat_rx.items() if compile_regex(rx).fullmatch(text)]
            if key_spec is not None and not compile_boolean(*key_spec).fullmatch(text):
                extra.append(False)
            if extra:
                props[name] = {"allOf": [props[name], *extra]}
        names = list(props)
        req = set(required)
        pairs: list[str | None] = []
        any_order = (self.property_order == "any" and SOME_ADDITIONAL not in node and hi is None
                     and lo <= len(req))
        for name in names:
            sub = f"{pointer}/properties/{_escape_pointer(name)}"
            if props[name] is False:
                if name in req:
                    return []
                pairs.append(None)
                continue
            pair = self.new_rule(f"pair_{name}")
            key = self.string_term(name, "KEY")
            self.rules[pair] = [(key, self.punct[":"], self.compile(props[name], sub))]
            pairs.append(pair)
        extras = self._other_members(names, patterns, pat_rx, additional, key_spec, pointer)
        comma = self.punct[","]
        if any_order:
            members = [(pairs[i], names[i] in req) for i in range(len(names)) if pairs[i] is not None]
            members += [(x, False) for x in extras]
            n_req = sum(r for _, r in members)
            if (1 << n_req) * (len(members) + 1) <= ANY_ORDER_MAX:
                return self._any_order(members)
        # Member counts: exact below ``cap``, which stands for "cap or more" without maxProperties.
        cap = hi if hi is not None else max(lo, 1)

        def step(c: int) -> int | None:
            if hi is not None:
                return c + 1 if c + 1 <= hi else None
            return min(c + 1, cap)

        # With SOME_ADDITIONAL, one additional member must also match that schema
        # (the witness); f: it was written (always true without the keyword).
        # The witness is an additional member of the merged object, or a listed
        # property that the negated schema did not list (nor match by pattern).
        witness = None
        witness_pairs: dict[int, str] = {}
        if SOME_ADDITIONAL in node:
            some = node[SOME_ADDITIONAL]
            if additional is not False:
                witness = self._other_members(names, patterns, pat_rx, {"allOf": [additional, some["schema"]]},
                                              key_spec, pointer, only_additional=True)[0]
            their = [compile_regex(ecma_pattern(p, pointer=pointer)) for p in some["patterns"]]
            for i, name in enumerate(names):
                text = json.dumps(name).encode()
                if pairs[i] is None or name in some["names"] or any(m.fullmatch(text) for m in their):
                    continue
                wp = self.new_rule(f"pair_{name}")
                self.rules[wp] = [(self.string_term(name, "KEY"), self.punct[":"],
                                   self.compile({"allOf": [props[name], some["schema"]]}, pointer))]
                witness_pairs[i] = wp
        flags = (False, True) if SOME_ADDITIONAL in node else (True,)
        tails: dict[tuple[int, bool], str] = {}
        for c in range(cap, -1, -1):
            _tick(pointer)
            for f in flags:
                tails[c, f] = self.new_rule("props_end")
        for (c, f), tail in tails.items():
            alts: list[tuple[str, ...]] = [()] if c >= lo and f else []
            nc = step(c)
            if nc is not None:
                for x in extras:
                    alts.append(((comma,) if c else ()) + (x, tails[nc, f]))
                if not f and witness is not None:
                    alts.append(((comma,) if c else ()) + (witness, tails[nc, True]))
            self.rules[tail] = alts
        # chain(i, c, f): properties i.. in order after c members.
        nxt = tails
        for i in range(len(names) - 1, -1, -1):
            _tick(pointer)
            cur = {}
            for c in range(min(i, cap) + 1):
                for f in flags:
                    r = self.new_rule(f"props_{i}")
                    alts = []
                    nc = step(c)
                    if pairs[i] is not None and nc is not None:
                        alts.append(((comma,) if c else ()) + (pairs[i], nxt[nc, f]))
                        if not f and i in witness_pairs:
                            alts.append(((comma,) if c else ()) + (witness_pairs[i], nxt[nc, True]))
                    if names[i] not in req or pairs[i] is None:
                        alts.append((nxt[c, f],))
                    self.rules[r] = alts
                    cur[c, f] = r
            nxt = cur
        return [(self.punct["{"], nxt[0, flags[0]], self.punct["}"])]

    def _any_order(self, members: list[tuple[str, bool]]) -> list[tuple[str, ...]]:
        """An object's members in any order: ``members`` are (rule, required) for each
        listed property and each kind of other member (pattern, additional).  Rule
        ``S`` follows a member with the set ``S`` of required names written so far
        (2 ** required rules): it may close once every required name is in, or take
        a comma and any member.  A listed name may appear twice, as additional keys
        always could (JSON texts with a repeated key are outside the model: each
        value is valid, and a parser keeps one), so ``minProperties`` above the
        required count and ``maxProperties`` keep the schema's order."""
        bits: list[int] = []
        k = 0
        for _, required in members:
            bits.append(1 << k if required else 0)
            k += required
        full = (1 << k) - 1
        after = [self.new_rule("members") for _ in range(full + 1)]
        comma = self.punct[","]
        for seen, rule in enumerate(after):
            alts: list[tuple[str, ...]] = [()] if seen == full else []
            alts += [(comma, m, after[seen | b]) for (m, _), b in zip(members, bits, strict=True)]
            self.rules[rule] = alts
        alts = [(self.punct["{"], self.punct["}"])] if full == 0 else []
        alts += [(self.punct["{"], m, after[b], self.punct["}"]) for (m, _), b in zip(members, bits, strict=True)]
        return alts

    def _key_spec(self, schema: Any, pointer: str) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
        """``propertyNames`` as a key terminal spec (None: any key)."""
        if schema is True or schema == {}:
            return None
        if schema is False:
            return (NOTHING, (), ())
        if not isinstance(schema, dict):
            raise UnsupportedSchema("propertyNames", pointer, "must be a schema")
        schema = self.merge([schema], pointer)
        allowed = set(_STRING_KW) | {"type", "enum", "const"}
        if set(schema) & _VALIDATION - allowed:
            self.unsupported("propertyNames", pointer, "only string keywords, enum and const are supported here")
            return None
        if "type" in schema and "string" not in self._types(schema, pointer):
            return (NOTHING, (), ())
        regex, also, excluding = self.string_spec(schema, pointer)
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            strings = [v for v in values if isinstance(v, str)]
            lits = "|".join(f"(?:{json_string_literal(v)})" for v in strings)
            also = (*also, self.formed(lits, JsonKeysForm(tuple(strings))) if strings else NOTHING)
        return regex, also, excluding

    def _other_members(self, names: list[str], patterns: dict, pat_rx: dict[str, str], additional: Any,
                       key_spec: tuple | None, pointer: str, only_additional: bool = False) -> list[str]:
        """Rules for members after the listed properties: one per set of patterns a
        key matches (their schemas together), and one for additional keys."""
        colon = self.punct[":"]
        spec_also: tuple[str, ...] = ()
        spec_excl: tuple[str, ...] = ()
        if key_spec is not None:
            spec_also, spec_excl = (key_spec[0], *key_spec[1]), key_spec[2]
        listed = tuple(self.value_text(n) for n in names)
        out = []
        pats = list(patterns)
        if len(pats) > 4 and not only_additional:
            self.unsupported("patternProperties", pointer + "/patternProperties", f"{len(pats)} patterns (at most 4)")
            pats = []
        for mask in range(1, 1 << len(pats) if not only_additional else 1):
            inside = [p for i, p in enumerate(pats) if mask >> i & 1]
            outside = [p for i, p in enumerate(pats) if not mask >> i & 1]
            rxs = [pat_rx[p] for p in inside]
            excl = listed + tuple(pat_rx[p] for p in outside) + spec_excl
            key = self.term(rxs[0], "PKEY", (*rxs[1:], *spec_also), excl)
            if self.terminals[key].dfa().is_empty():
                continue
            value = patterns[inside[0]] if len(inside) == 1 else {"allOf": [patterns[p] for p in inside]}
            member = self.new_rule("pattern_pair")
            ptr = f"{pointer}/patternProperties/{_escape_pointer(inside[0])}"
            self.rules[member] = [(key, colon, self.compile(value, ptr))]
            out.append(member)
        if additional is not False:
            excl = tuple(pat_rx[p] for p in pats) + spec_excl
            if names:
                excl = (self._raw_keys(names), *excl)
            if self.spelling != "json":  # its keys take escapes: the listed ones out in every spelling
                key = self.term(f'"{jsontext.any_chars(jsontext.key_spelling(self.spelling))}"', "AKEY", spec_also,
                                (*listed, *excl[1 if names else 0 :]))
            else:
                key = self.term(f'"{_RAW}*"', "AKEY", spec_also, excl)
            member = self.new_rule("additional_pair")
            self.rules[member] = [(key, colon, self.compile(additional, pointer + "/additionalProperties"))]
            out.append(member)
        return out

    def _raw_keys(self, names: list[str]) -> str:
        """The listed names as JSON keys written without escapes (one flat alternation,
        its words kept).

        Additional keys are written without escapes (tighter than the schema), so
        excluding the listed names in that form is exact: a listed name can never be
        written as an additional key.
        """
        raw = [n for n in dict.fromkeys(names) if all(c not in '"\\' and ord(c) >= 0x20 for c in n)]
        if not raw:
            return NOTHING
        text = '"(?:' + "|".join(re.escape(n) for n in raw) + ')"'
        return self.formed(text, WordsForm(tuple(sorted({f'"{n}"'.encode() for n in raw}))))

    def _array(self, node: dict, pointer: str) -> list[tuple[str, ...]]:
        items = node.get("items")
        prefix = node.get("prefixItems")
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, rest, rest_ptr = items, node.get("additionalItems", True), pointer + "/additionalItems"
        else:
            prefix = prefix or []
            rest, rest_ptr = (items if items is not None else True), pointer + "/items"
        lo = _count_of("minItems", node.get("minItems", 0), f"{pointer}/minItems")
        hi = node.get("maxItems")
        hi = None if hi is None else _count_of("maxItems", hi, f"{pointer}/maxItems")
        if rest is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        contains = node.get("contains")
        if contains is not None:
            _check_schemas([contains], "contains", pointer + "/contains", single=True)
        min_contains = node.get("minContains", 1)
        if "unevaluatedItems" in node:
            self.unsupported("unevaluatedItems", f"{pointer}/unevaluatedItems", "not expressible by this compiler")
        not_unique = "uniqueness cannot be expressed"
        if node.get("uniqueItems") is True and (hi is None or hi > 1) and (hi is None or hi >= lo):
            unique = self._unique_items(node, pointer, prefix, rest, lo, hi)
            if not isinstance(unique, str):
                return unique
            not_unique = unique
        if contains is not None and ("maxContains" in node or min_contains not in (0, 1)):
            self.unsupported("maxContains" if "maxContains" in node else "minContains", pointer,
                             "counting the items that match contains")
        if min_contains == 0:
            contains = None
        if node.get("uniqueItems") is True and (hi is None or hi > 1):
            self.unsupported("uniqueItems", pointer + "/uniqueItems", not_unique)
        if hi is not None and hi < lo:
            return []
        unroll = max(len(prefix), lo) if hi is None else hi
        if unroll > 2000:
            raise UnsupportedSchema("maxItems" if hi is not None else "minItems", pointer, f"{unroll} items to unroll")

        def elem(k: int, witness: bool = False) -> str:
            if k < len(prefix):
                schema, ptr = prefix[k], f"{pointer}/{'items' if isinstance(items, list) else 'prefixItems'}/{k}"
            else:
                schema, ptr = rest, rest_ptr
            if witness:  # an item that also matches contains
                return self.compile({"allOf": [schema, contains]}, pointer + "/contains")
            return self.compile(schema, ptr)

        comma = self.punct[","]
        # after[f](k): what may follow once k >= 1 items were written; f: an item
        # matching contains was among them (always true without contains).
        flags = (False, True) if contains is not None else (True,)
        after: dict[bool, str] = {}
        for f in flags:
            after[f] = self.new_rule("items_more" if hi is None else "items_end")
        for f in flags:
            alts: list[tuple[str, ...]] = [()] if f else []
            if hi is None:
                alts.append((comma, elem(unroll), after[f]))
                if not f:
                    alts.append((comma, elem(unroll, True), after[True]))
            self.rules[after[f]] = alts
        for k in range(unroll - 1, 0, -1):
            _tick(pointer)
            cur = {}
            for f in flags:
                r = self.new_rule(f"items_{k}")
                alts = [(comma, elem(k), after[f])]
                if not f:
                    alts.append((comma, elem(k, True), after[True]))
                if k >= lo and f:
                    alts.append(())
                self.rules[r] = alts
                cur[f] = r
            after = cur
        body: list[tuple[str, ...]] = []
        if lo == 0 and contains is None:
            body.append((self.punct["["], self.punct["]"]))
        if hi is None or hi >= 1:
            start = flags[0]
            body.append((self.punct["["], elem(0), after[start], self.punct["]"]))
            if contains is not None:
                body.append((self.punct["["], elem(0, True), after[True], self.punct["]"]))
        return body

    def _unique_items(self, node: dict, pointer: str, prefix: list, rest: Any, lo: int,
                      hi: int | None) -> list[tuple[str, ...]] | str:
        """``uniqueItems`` where every item is one of finitely many values (enum,
        const, null, boolean, a short integer range, unions of those): the arrays
        written item by item from a rule per set of values used so far, each item
        a value not in the set (values equal as JSON, like 1 and 1.0, are one).
        The set's size is the array's length and says the position, so the prefix
        schemas, the item counts and ``contains`` with ``minContains``/``maxContains``
        (how many values in the set match it) are exact too.  The values are the
        enum filter's (:meth:`_valid`), each in its serialization.  Past
        :data:`_MAX_UNIQUE_SETS` reachable sets, or where an item's values are not
        finitely many, the reason is returned instead."""
        groups: dict[str, int] = {}
        members: list[list[Any]] = []

        def domain(schema: Any, ptr: str) -> list[int] | None:
            if schema is False:
                return []
            try:
                values = self._finite_values(schema, ptr)
            except UnsupportedSchema:
                return None
            if values is None:
                return None
            out = []
            for v in values:
                if not self._valid(v, schema, ptr):
                    continue
                g = groups.setdefault(json.dumps(_canonical(v), sort_keys=True), len(groups))
                if g == len(members):
                    members.append([])
                if not any(json.dumps(v, sort_keys=True) == json.dumps(m, sort_keys=True) for m in members[g]):
                    members[g].append(v)
                if g not in out:
                    out.append(g)
            return out

        where = "items" if isinstance(node.get("items"), list) else "prefixItems"
        doms = []
        for k, schema in enumerate(prefix[:hi]):
            d = domain(schema, f"{pointer}/{where}/{k}")
            if d is None:
                return f"item {k} may take infinitely many values, so uniqueness cannot be expressed"
            doms.append(d)
        more = hi is None or hi > len(prefix)
        rest_dom = domain(rest, pointer) if more else []
        if rest_dom is None:
            return "the items may take infinitely many values, so uniqueness cannot be expressed"
        contains = node.get("contains")
        min_c, max_c = node.get("minContains", 1), node.get("maxContains")
        if contains is not None:
            _check_schemas([contains], "contains", pointer + "/contains", single=True)
            min_c = _count_of("minContains", min_c, f"{pointer}/minContains")
            max_c = None if max_c is None else _count_of("maxContains", max_c, f"{pointer}/maxContains")
            matches = {g for g in range(len(members))
                       if contains is True or (contains is not False and self._valid(members[g][0], contains, pointer))}

        def done(used: int, n: int) -> bool:
            if n < lo or (hi is not None and n > hi):
                return False
            if contains is None:
                return True
            c = sum(1 for g in matches if used >> g & 1)
            return c >= min_c and (max_c is None or c <= max_c)

        # the reachable sets, by size
        layers: list[set[int]] = [{0}]
        succ: dict[int, list[int]] = {}
        total = 1
        while layers[-1] and (hi is None or len(layers) <= hi):
            _tick(pointer)
            n = len(layers) - 1
            dom = doms[n] if n < len(doms) else rest_dom
            nxt: set[int] = set()
            for used in layers[-1]:
                succ[used] = [g for g in dom if not used >> g & 1]
                nxt.update(used | 1 << g for g in succ[used])
            total += len(nxt)
            if total > _MAX_UNIQUE_SETS:
                return (f"{len(members)} item values make more than {_MAX_UNIQUE_SETS} sets of values "
                        "to track, so uniqueness cannot be expressed")
            layers.append(nxt)
        live: dict[int, bool] = {}
        for n in range(len(layers) - 1, -1, -1):
            for used in layers[n]:
                live[used] = done(used, n) or any(live.get(used | 1 << g, False) for g in succ.get(used, ()))
        if not live[0]:
            return []
        symbols = []
        for vs in members:
            lits = [self.value_literal(v) for v in vs]
            if len(lits) > 1:
                r = self.new_rule("unique_item")
                self.rules[r] = [(x,) for x in lits]
                lits = [r]
            symbols.append(lits[0])
        rule = {used: self.new_rule("unique_items") for used in live if live[used]}
        comma = self.punct[","]
        for n, layer in enumerate(layers):
            for used in layer:
                if not live[used]:
                    continue
                alts: list[tuple[str, ...]] = [()] if done(used, n) else []
                for g in succ.get(used, ()):
                    if live.get(used | 1 << g, False):
                        alts.append(((comma,) if n else ()) + (symbols[g], rule[used | 1 << g]))
                self.rules[rule[used]] = alts
        return [(self.punct["["], rule[0], self.punct["]"])]

    def _finite_values(self, schema: Any, pointer: str, depth: int = 0) -> list | None:
        """Values among which are all that ``schema`` accepts, where finitely many are
        easily listed (enum, const, null and boolean types, an integer range of at most
        64 values, anyOf/oneOf of those); None otherwise.  (Not filtered: the caller
        asks :meth:`_valid` which of them the schema accepts.)"""
        if schema is False:
            return []
        if not isinstance(schema, dict) or depth > 8:
            return None
        node = self._flat(schema, outline=True)
        if node is False or node.get("not") in ({}, True):
            return []
        if not isinstance(node, dict):
            return None
        if "const" in node:
            return [node["const"]]
        if "enum" in node:
            return list(node["enum"]) if isinstance(node["enum"], list) else None
        if "type" in node:
            types = set(self._types(node, pointer))
            if types <= {"null", "boolean"}:
                return ([None] if "null" in types else []) + ([True, False] if "boolean" in types else [])
            if types == {"integer"}:
                (low, low_x), (high, high_x) = _bounds(node)[0] or (None, False), _bounds(node)[1] or (None, False)
                if low is not None and high is not None:
                    first = math.floor(low) + 1 if low_x else math.ceil(low)
                    last = math.ceil(high) - 1 if high_x else math.floor(high)
                    if last - first < 64:
                        return list(range(first, last + 1))
        for branches in _branch_lists(node):  # (every value is among those of any one list)
            out: list = []
            for i, branch in enumerate(branches):
                vals = self._finite_values(branch, f"{pointer}/{i}", depth + 1)
                if vals is None:
                    break
                out.extend(vals)
            else:
                return out
        return None

    # ------------------------------------------------------------ survey --

    def _survey(self) -> None:
        """One pass over the schemas the compile can reach (the root, its subschemas,
        what their ``$ref`` point to), before any work depends on them: each keyword
        value the compiler reads is checked (:class:`InvalidSchema` naming the keyword,
        the value and its pointer: ``maxLength: 2.5`` is refused, never rounded), the
        ``enum`` and ``const`` values are measured (:class:`LimitExceeded`
        ``max_enum``, ``max_enum_bytes``: an enum of 100,000 strings is refused here,
        not after the engines spent a gigabyte on it), and an unknown keyword that is
        likely a misspelled one (``requried``) is warned about.  Iterative: the
        nesting was bounded before (:func:`_check_nesting`)."""
        seen: set[int] = set()
        # (schema, its path: a pointer string, or (the parent's path, keyword, name or index or None))
        stack: list[tuple[Any, Any]] = [(self.root, "")]
        size = 0  # bytes of enum and const values so far
        unknown: dict[str, list[Any]] = {}  # a likely misspelled keyword: the paths of its schemas
        while stack:
            node, path = stack.pop()
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            if len(seen) & 255 == 0:
                _tick(_path_pointer(path))
            if "$ref" in node:
                ref = node["$ref"]
                if not isinstance(ref, str):
                    raise InvalidSchema("$ref", _path_pointer((path, "$ref", None)), "must be a string (a URI reference)",
                                        ref)
                try:
                    stack.append(self.resolve(ref, ""))
                except UnsupportedSchema:
                    pass  # the compile says why, where it reads the reference
                if self._ref_alone:  # drafts 3 to 7: the keywords beside a $ref are ignored
                    continue
            for k, v in node.items():
                check = _VALUE_CHECKS.get(k)
                if check is None:
                    if k not in _KNOWN_KEYWORDS and _likely_keyword(k):
                        unknown.setdefault(k, []).append(path)
                    continue
                if (k == "then" or k == "else") and "if" not in node:
                    continue  # (not read without an if)
                problem = check(v)
                if problem is not None:
                    below, reason, bad = problem
                    raise InvalidSchema(k, _path_pointer((path, k, None)) + below, reason, bad)
                if k.startswith("exclusiveM") and self._flag_bounds is not None \
                        and isinstance(v, bool) is not self._flag_bounds:
                    raise InvalidSchema(k, _path_pointer((path, k, None)), "must be a boolean (a flag on "
                                        f"{'minimum' if 'Min' in k else 'maximum'}) in drafts 3 and 4"
                                        if self._flag_bounds else "must be a number in drafts 6 and later (the "
                                        "boolean flag is draft 4's form)", v)
                kind = _SURVEYED.get(k)
                if kind is None:
                    continue
                if kind == "one" or (kind == "items" and not isinstance(v, list)):
                    stack.append((v, (path, k, None)))
                elif kind == "map":
                    stack.extend((x, (path, k, name)) for name, x in v.items() if isinstance(x, dict))
                else:
                    stack.extend((x, (path, k, i)) for i, x in enumerate(v) if isinstance(x, dict))
            if "enum" in node or "const" in node:
                kw = "enum" if "enum" in node else "const"
                values = node["enum"] if kw == "enum" else [node["const"]]
                if kw == "enum" and len(values) > self.max_enum:
                    raise _located(LimitExceeded("max_enum", len(values), self.max_enum, "values in one enum"),
                                   _path_pointer((path, kw, None)))
                if "enum" in node and "const" in node:
                    values = [*values, node["const"]]
                size += _json_size(values, self.max_enum_bytes - size)
                if size > self.max_enum_bytes:
                    raise _located(LimitExceeded("max_enum_bytes", size, self.max_enum_bytes,
                                                 "bytes of JSON text in the enum and const values of the schema"),
                                   _path_pointer((path, kw, None)))
        for k, paths in unknown.items():
            more = f" (and {len(paths) - 1} more schemas)" if len(paths) > 1 else ""
            warnings.warn(f"unknown JSON schema keyword {k!r} at {_path_pointer(paths[0]) or '/'}{more} is ignored (an "
                          f"annotation to the spec); did you mean {_likely_keyword(k)!r}?", stacklevel=4)

    # --------------------------------------------------------- any value --

    def any_value(self) -> str:
        if self._any is None:
            v = self._any = self.new_rule("json_value")
            string = self.term(self.string_text(), "STRING")
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
        _check_nesting(self.root, self.max_depth)  # before any recursive walk meets a deep schema
        try:
            source = json.dumps(self.root) if not isinstance(self.root, bool) else str(self.root)
        except RecursionError:
            raise LimitExceeded("max_depth", self.max_depth + 1, self.max_depth,
                                "the schema nests deeper than Python's recursion limit") from None
        if any(m in source for m in _REFERENCE_MARKERS) or _ANCHOR_REF.search(source) or '"id": ' in source:
            self.root = _static_references(self.root)
        newer = _newer_keywords(self.root)
        if newer and any(f'"{k}"' in source for k in newer):
            self.root = _strip_keywords(self.root, newer)
        if self._lacking:
            self._tighter.extend(_keywords_at(self.root, self._lacking))
        self._survey()
        start = self.compile(self.root, "")
        if start != "start":
            self.rules["start"] = [(start,)]
        ignore: tuple[str, ...] = ()
        if self.whitespace == "flexible":
            self.terminals["WS"] = Terminal("WS", WS)
            ignore = ("WS",)
        rules = {k: tuple(v) for k, v in self.rules.items()}
        try:
            return Grammar(start="start", rules=rules, terminals=self.terminals, ignore=ignore, source=source)
        except Unsatisfiable as e:
            # the deepest schema on the way to the dead end says which keyword emptied it
            node, pointer = next((self._where[r] for r in reversed(e.path) if r in self._where), (self.root, ""))
            keyword = _empty_keyword(node)
            if self._tighter:  # (not proof: a value the tighter form left out may be valid)
                kw, where = self._tighter[0]
                raise UnsupportedSchema(kw, where or pointer, "expressed only tighter than the schema (in the "
                                        "complement of a schema, an enum next to it, or a keyword its draft does not "
                                        "have), which leaves no value; "
                                        f"the schema at {pointer or '/'} ({keyword!r}) may still have some") from None
            raise Unsatisfiable(f"unsatisfiable schema: no JSON value matches the schema at {pointer or '/'} "
                                f"({keyword!r}); {e}", rule=e.rule, path=e.path, keyword=keyword,
                                pointer=pointer) from None


# ------------------------------------------------------------ references --

# Keywords whose values are schemas (one, a list, or a map of names to schemas): where
# the reference pass looks for anchors and references (not inside const, enum, ...).
_ONE_SCHEMA = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then",
               "else", "unevaluatedItems", "unevaluatedProperties", "items")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_REFERENCE_MARKERS = ('"$id"', '"$anchor"', '"$dynamicAnchor"', '"$dynamicRef"', '"$recursiveRef"')
_ANCHOR_REF = re.compile(r'"\$ref": "#[^/"]')  # a reference to a plain-name fragment


def _subschemas(node: dict, pointer: str) -> Iterator[tuple[str, Any, str]]:
    """``(keyword, subschema, its pointer)`` for each schema directly inside ``node``."""
    for k in _ONE_SCHEMA:
        v = node.get(k)
        if isinstance(v, (dict, bool)):
            yield k, v, f"{pointer}/{k}"
    for k in _SCHEMA_LIST:
        v = node.get(k)
        if isinstance(v, list):
            for i, x in enumerate(v):
                yield k, x, f"{pointer}/{k}/{i}"
    for k in _SCHEMA_MAP:
        v = node.get(k)
        if isinstance(v, dict):
            for name, x in v.items():
                if isinstance(x, (dict, bool)):  # (dependencies: a list of names is no schema)
                    yield k, x, f"{pointer}/{k}/{_escape_pointer(name)}"


def _check_nesting(root: Any, max_depth: int) -> None:
    """:class:`LimitExceeded` (``max_depth``, with the JSON pointer) where ``root``
    nests too deeply for the recursive walks that follow (``json.dumps``, the
    reference pass, the compile): schemas inside schemas deeper than ``max_depth``
    (the root is 1, as the compile counts), or arrays and objects anywhere (enum
    values, annotations) deeper than ``2 * max_depth + 32``.  Iterative, one look at
    each array and object."""
    if not isinstance(root, (dict, list)):
        return
    limit = 2 * max_depth + _JSON_DEPTH_SLACK
    # (value, its path as _path_pointer reads it, arrays and objects down to it, schemas
    # down to it, its role: "schema", "list" of schemas, "map" of names to schemas, or any
    # other "value")
    stack: list[tuple[Any, Any, int, int, str]] = [(root, "", 1, 1, "schema")]
    seen = 0
    while stack:
        value, path, depth, level, role = stack.pop()
        seen += 1
        if not seen & 1023:
            _tick(_path_pointer(path))
        if depth > limit:
            raise _located(LimitExceeded("max_depth", depth, limit, f"arrays and objects nested (at most 2 × max_depth "
                                                                    f"+ {_JSON_DEPTH_SLACK})"), _path_pointer(path))
        if level > max_depth and role == "schema":
            raise _located(LimitExceeded("max_depth", level, max_depth, "schemas nested"), _path_pointer(path))
        for k, v in (value.items() if isinstance(value, dict) else enumerate(value)):
            if not isinstance(v, (dict, list)):
                continue
            if role == "schema":
                kind = _NESTED.get((k, type(v)), "value") if isinstance(k, str) else "value"
            elif role == "value":
                kind = "value"
            else:
                kind = "schema" if isinstance(v, dict) else "value"
            stack.append((v, (path, k, None), depth + 1, level + (kind == "schema"), kind))


def _path_pointer(path: Any) -> str:
    """The JSON pointer of a path of :meth:`_Compiler._survey` or :func:`_check_nesting`:
    a pointer, or ``(the parent's path, a key or index, a name or index or None)``
    (built only when one is needed: an error, a deadline check)."""
    tokens: list[str] = []
    while isinstance(path, tuple):
        path, key, sub = path
        if sub is not None:
            tokens.append(_escape_pointer(str(sub)))
        tokens.append(_escape_pointer(str(key)))
    return path + "".join("/" + t for t in reversed(tokens))


#: (keyword, type of its value) in a schema: "schema" (one), "list" of schemas, "map" of
#: names to schemas (what _check_nesting counts as a schema level)
_NESTED: dict[tuple[str, type], str] = {
    **{(k, dict): "schema" for k in _ONE_SCHEMA},
    **{(k, list): "list" for k in _SCHEMA_LIST},
    **{(k, dict): "map" for k in _SCHEMA_MAP},
}
#: the keywords whose subschemas _survey walks: "one" schema, a "list", a "map", or "items" (either)
_SURVEYED: dict[str, str] = {
    **dict.fromkeys(("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then",
                     "else", "unevaluatedItems", "unevaluatedProperties"), "one"),
    **dict.fromkeys(("allOf", "anyOf", "oneOf", "prefixItems"), "list"),
    **dict.fromkeys(("properties", "patternProperties", "dependentSchemas", "dependencies"), "map"),
    "items": "items",
}


Problem = tuple[str, str, Any] | None
"""What is wrong with a keyword's value: (the pointer below the keyword's, why, the
value found there), or None."""


def _is_schema(v: Any) -> bool:
    return isinstance(v, (dict, bool))


def _check_count(v: Any) -> Problem:
    problem = _count_problem(v)
    return ("", problem, v) if problem else None


def _check_number(v: Any) -> Problem:
    return None if _numbers(v) else ("", "must be a number", v)


def _check_bound(v: Any) -> Problem:  # a number, or draft 4's flag on minimum/maximum
    return None if _numbers(v) or isinstance(v, bool) else ("", "must be a number (or, in draft 4, a boolean)", v)


def _check_step(v: Any) -> Problem:
    if not _numbers(v):
        return ("", "is not a number (must be a positive number)", v)
    return None if v > 0 else ("", "is not a positive number", v)


def _check_string(v: Any) -> Problem:
    return None if isinstance(v, str) else ("", "must be a string", v)


def _check_bool(v: Any) -> Problem:
    return None if isinstance(v, bool) else ("", "must be a boolean", v)


def _check_schema(v: Any) -> Problem:
    return None if _is_schema(v) else ("", "must be a schema (an object or a boolean)", v)


def _check_schema_list(v: Any, empty: bool = True) -> Problem:
    if not isinstance(v, list) or (not v and not empty):
        return ("", "must be a " + ("" if empty else "non-empty ") + "list of schemas", v)
    bad = next((i for i, x in enumerate(v) if not _is_schema(x)), None)
    return None if bad is None else (f"/{bad}", "must be a schema (an object or a boolean)", v[bad])


def _check_schema_map(v: Any) -> Problem:
    if not isinstance(v, dict):
        return ("", "must be an object (of schemas)", v)
    bad = next((k for k, x in v.items() if not _is_schema(x)), None)
    return None if bad is None else (f"/{_escape_pointer(bad)}", "must be a schema (an object or a boolean)", v[bad])


def _check_names(v: Any) -> Problem:
    if not isinstance(v, list):
        return ("", "must be a list of property names (strings)", v)
    bad = next((i for i, x in enumerate(v) if not isinstance(x, str)), None)
    if bad is not None:
        return (f"/{bad}", "must be a property name (a string)", v[bad])
    if len(set(v)) < len(v):
        twice = next(x for i, x in enumerate(v) if x in v[:i])
        return ("", f"must list each name once ({twice!r} is listed twice)", v)
    return None


def _check_type(v: Any) -> Problem:
    names = v if isinstance(v, list) else [v]
    if not isinstance(v, (str, list)) or not names:
        return ("", f"must be a type name or a non-empty list of them ({', '.join(_TYPES)})", v)
    for i, x in enumerate(names):
        if x not in _TYPES:  # (draft 3's "any" and schemas in the list are not supported)
            return (f"/{i}" if isinstance(v, list) else "", f"must be one of {', '.join(_TYPES)}", x)
    if len(set(names)) < len(names):
        return ("", "must list each type once", v)
    return None


def _check_dependencies(v: Any, schemas: bool = True, names: bool = True) -> Problem:
    if not isinstance(v, dict):
        return ("", "must be an object", v)
    for k, x in v.items():
        problem = _check_names(x) if names and isinstance(x, list) else (
            _check_schema(x) if schemas else ("", "must be a list of property names", x))
        if problem is not None:
            return (f"/{_escape_pointer(k)}{problem[0]}", problem[1], problem[2])
    return None


def _check_items(v: Any) -> Problem:
    return _check_schema_list(v) if isinstance(v, list) else _check_schema(v)


#: The keywords whose values the compiler reads, each with what its value must be.
_VALUE_CHECKS: dict[str, Any] = {
    **dict.fromkeys(("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                     "minContains", "maxContains"), _check_count),
    "minimum": _check_number, "maximum": _check_number,
    "exclusiveMinimum": _check_bound, "exclusiveMaximum": _check_bound,
    "multipleOf": _check_step,
    "pattern": _check_string, "format": _check_string, "$ref": _check_string,
    "uniqueItems": _check_bool,
    "required": _check_names,
    "enum": lambda v: None if isinstance(v, list) else ("", "must be a list of values", v),
    "type": _check_type,
    "properties": _check_schema_map, "patternProperties": _check_schema_map, "dependentSchemas": _check_schema_map,
    "dependentRequired": lambda v: _check_dependencies(v, schemas=False),
    "dependencies": _check_dependencies,
    "items": _check_items, "prefixItems": _check_schema_list,
    **dict.fromkeys(("allOf", "anyOf", "oneOf"), lambda v: _check_schema_list(v, empty=False)),
    **dict.fromkeys(("additionalItems", "additionalProperties", "contains", "propertyNames", "not", "if",
                     "unevaluatedItems", "unevaluatedProperties"), _check_schema),
    **dict.fromkeys(("then", "else"), _check_schema),
}

#: Keywords of drafts 3 to 2020-12 and common annotations: a key among these is no
#: misspelling (the validation keywords are :data:`_VALIDATION`).
_KNOWN_KEYWORDS = frozenset({
    *_VALIDATION, "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$dynamicRef", "$recursiveAnchor",
    "$recursiveRef", "$defs", "definitions", "$comment", "$vocabulary", "title", "description", "default",
    "examples", "example", "readOnly", "writeOnly", "deprecated", "contentEncoding", "contentMediaType",
    "contentSchema", "disallow", "extends", "divisibleBy", "nullable", "discriminator",
})
_CONSTRAINING = sorted(k for k in _VALIDATION if not k.startswith("$masklab:"))


@functools.lru_cache(maxsize=1024)
def _likely_keyword(key: str) -> str | None:
    """The validation keyword an unknown ``key`` most likely misspells (``requried``:
    ``required``), or None: an annotation-like name (``x-...``, ``$...``), or none
    close enough (difflib's ratio 0.8), or one closer to a known annotation
    (``example``: ``examples``, which constrains nothing either)."""
    if key in _KNOWN_KEYWORDS or key[:2].lower() == "x-" or key[:1] in "$@_" or len(key) < 4:
        return None
    best = difflib.get_close_matches(key, sorted(_KNOWN_KEYWORDS - set(_INTERNAL) - {FRACTIONAL, SOME_ADDITIONAL}),
                                     n=1, cutoff=0.8)
    if not best and key.lower() in {k.lower() for k in _CONSTRAINING}:
        best = [next(k for k in _CONSTRAINING if k.lower() == key.lower())]
    return best[0] if best and best[0] in _CONSTRAINING else None


def _json_size(value: Any, budget: int) -> int:
    """Bytes of ``value``'s JSON text (strings as UTF-8, unescaped; a close estimate),
    counted until past ``budget`` (then any number above it)."""
    total = 0
    stack = [value]
    while stack and total <= budget:
        v = stack.pop()
        if isinstance(v, str):
            total += 2 + (len(v) if len(v) > budget or v.isascii() else len(v.encode("utf-8", "surrogatepass")))
        elif isinstance(v, dict):
            total += 2 + 2 * len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            total += 2 + len(v)
            stack.extend(v)
        else:
            total += len(repr(v)) if not isinstance(v, bool) and v is not None else 5
    return total


def _static_references(root: dict) -> dict:
    """The schema with every reference a JSON pointer into it, or UnsupportedSchema.

    ``$ref`` to a plain-name fragment (``#name``) goes to the subschema with that
    ``$anchor`` or ``$dynamicAnchor`` (or a ``"$id": "#name"`` of drafts 6 and 7, an
    ``"id": "#name"`` of draft 4; a document whose ``$schema`` is draft 3 or 4 names its
    identifiers ``id``, and a ``$id`` there is no keyword).  In a
    document that is one schema resource (no subschema with an ``$id`` of its own
    other than a fragment), the dynamic scope of every evaluation holds that resource
    only, so ``$dynamicRef`` resolves as ``$ref`` does (to its dynamic anchor, the
    outermost and only one of that name) and ``$recursiveRef: "#"`` to the root.
    Where a subschema has its own base URI, references inside it and dynamic ones
    anywhere would need that scoping: they raise :class:`UnsupportedSchema` rather
    than resolve against the wrong base (a reference silently dropped or misread makes
    the grammar looser than the schema).
    """
    anchors: dict[str, str] = {}
    twice: set[str] = set()
    resources: list[str] = []
    draft = root.get("$schema")
    # the identifier keyword: "id" up to draft 4, where "$id" is no keyword (ignored)
    id_keyword = "id" if isinstance(draft, str) and re.search(r"draft-0[34]/", draft) else "$id"

    def collect(node: Any, pointer: str) -> None:
        if not isinstance(node, dict):
            return
        names = [node.get("$anchor"), node.get("$dynamicAnchor")]
        own_id = node.get(id_keyword)
        if isinstance(own_id, str) and pointer:
            if own_id.startswith("#"):
                if own_id[1:] and not own_id.startswith("#/"):
                    names.append(own_id[1:])  # draft 6/7: a plain-name fragment
            else:
                resources.append(pointer)
        for name in dict.fromkeys(n for n in names if isinstance(n, str)):
            if name in anchors and anchors[name] != pointer:
                twice.add(name)
            anchors[name] = pointer
        for _, sub, ptr in _subschemas(node, pointer):
            collect(sub, ptr)

    collect(root, "")

    def target(ref: Any, keyword: str, pointer: str) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsupportedSchema(keyword, pointer, f"only local references are supported, not {ref!r}")
        if ref == "#" or ref.startswith("#/"):
            return ref
        name = ref[1:]
        if name in twice:
            raise UnsupportedSchema(keyword, pointer, f"the anchor {name!r} is defined twice")
        if name not in anchors:
            raise UnsupportedSchema(keyword, pointer, f"no subschema has the anchor {name!r}")
        return "#" + anchors[name]

    def inside(pointer: str) -> str | None:
        return next((r for r in resources if pointer == r or pointer.startswith(r + "/")), None)

    def rewrite(node: Any, pointer: str) -> Any:
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            if keyword not in node:
                continue
            where = f"{pointer}/{keyword}"
            res = inside(pointer)
            if res is not None:
                raise UnsupportedSchema(keyword, where, f"a reference inside the subschema at {res or '/'} with an "
                                                        "$id of its own (another base URI)")
            if keyword != "$ref" and resources:
                raise UnsupportedSchema(keyword, where, "a dynamic reference in a document of several schema "
                                                        f"resources ($id at {resources[0]})")
            if keyword == "$recursiveRef" and node[keyword] != "#":
                raise UnsupportedSchema(keyword, where, f"$recursiveRef must be '#', not {node[keyword]!r}")
            ref = target(node[keyword], keyword, where)
            del out[keyword]
            if "$ref" in out:  # $ref and $dynamicRef both: the value must match both targets
                if not isinstance(out.get("allOf", []), list):
                    raise UnsupportedSchema("allOf", f"{pointer}/allOf", "allOf must be a list")
                out["allOf"] = [*out.get("allOf", []), {"$ref": ref}]
            else:
                out["$ref"] = ref
        for keyword, sub, ptr in _subschemas(node, pointer):
            if not isinstance(sub, dict):
                continue
            new = rewrite(sub, ptr)
            if keyword in _SCHEMA_MAP:
                name = ptr.rsplit("/", 1)[1]
                out[keyword] = dict(out[keyword]) if out[keyword] is node[keyword] else out[keyword]
                out[keyword][_unescape_pointer(name)] = new
            elif isinstance(node[keyword], list):
                out[keyword] = list(out[keyword]) if out[keyword] is node[keyword] else out[keyword]
                out[keyword][int(ptr.rsplit("/", 1)[1])] = new
            else:
                out[keyword] = new
        return out

    return rewrite(root, "")


def _newer_keywords(root: Any) -> tuple[str, ...]:
    """Keywords of later drafts that would loosen a schema of the root's draft if read
    there: ``prefixItems`` (before 2020-12, ``items`` speaks of every item) and
    ``minContains``/``maxContains`` (before 2019-09, ``contains`` needs one item)."""
    draft = root.get("$schema") if isinstance(root, dict) else None
    if not isinstance(draft, str):
        return ()
    if re.search(r"draft-0[3-7]/", draft):
        return ("prefixItems", "minContains", "maxContains")
    if "draft/2019-09/" in draft:
        return ("prefixItems",)
    return ()


#: Keywords the compiler reads that a draft does not have (jsonschema's validator of
#: the draft ignores them), besides those :func:`_newer_keywords` strips: read tighter
#: where they constrain, as no keyword in a complement and in disjointness proofs.
#: Draft 4's numeric exclusiveMinimum/Maximum are invalid there (its flag form is read).
_DRAFT4_LACKS = frozenset({"const", "contains", "propertyNames", "if", "then", "else", "dependentRequired",
                           "dependentSchemas", "unevaluatedProperties", "unevaluatedItems"})
_LACKING = (
    (re.compile(r"draft-03/"), _DRAFT4_LACKS | {"allOf", "anyOf", "oneOf", "not", "maxProperties", "minProperties",
                                                 "multipleOf"}),
    (re.compile(r"draft-04/"), _DRAFT4_LACKS),
    (re.compile(r"draft-06/"), frozenset({"if", "then", "else", "dependentRequired", "dependentSchemas",
                                          "unevaluatedProperties", "unevaluatedItems"})),
    (re.compile(r"draft-07/"), frozenset({"dependentRequired", "dependentSchemas", "unevaluatedProperties",
                                          "unevaluatedItems"})),
    (re.compile(r"draft/2019-09/"), frozenset({"dependencies"})),
    (re.compile(r"draft/2020-12/"), frozenset({"dependencies", "additionalItems"})),
)


def _lacking_keywords(root: Any) -> frozenset[str]:
    """The keywords of :data:`_LACKING` for the draft the root's ``$schema`` names
    (none without one: then every draft's keywords are read)."""
    draft = root.get("$schema") if isinstance(root, dict) else None
    if isinstance(draft, str):
        for rx, lacking in _LACKING:
            if rx.search(draft):
                return lacking
    return frozenset()


def _keywords_at(root: Any, keywords: frozenset[str]) -> list[tuple[str, str]]:
    """``(keyword, pointer)`` of each of ``keywords`` used in a schema of ``root``
    (an iterative walk: deep schemas were measured before)."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, pointer = stack.pop()
        if not isinstance(node, dict):
            continue
        found.extend((k, f"{pointer}/{k}") for k in node if k in keywords)
        stack.extend((x, where) for _, x, where in _subschemas(node, pointer))
    return found


def _strip_keywords(node: Any, keywords: tuple[str, ...]) -> Any:
    """``node`` without ``keywords`` in it or any subschema (a copy; values of
    ``enum``/``const`` and other non-schema keywords are left as they are)."""
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if k not in keywords}
    for k in _ONE_SCHEMA:
        if isinstance(out.get(k), dict):
            out[k] = _strip_keywords(out[k], keywords)
    for k in _SCHEMA_LIST:
        if isinstance(out.get(k), list):
            out[k] = [_strip_keywords(x, keywords) for x in out[k]]
    for k in _SCHEMA_MAP:
        if isinstance(out.get(k), dict):
            out[k] = {n: _strip_keywords(x, keywords) for n, x in out[k].items()}
    return out


def _check_schemas(items: list, keyword: str, pointer: str, single: bool = False) -> None:
    """Each item is a schema (an object or a boolean), or UnsupportedSchema there."""
    for i, x in enumerate(items):
        if not isinstance(x, (dict, bool)):
            where = pointer if single else f"{pointer}/{i}"
            raise UnsupportedSchema(keyword, where, f"a schema must be an object or a boolean, not {type(x).__name__}")


def _judge(root: dict) -> Any:
    """A jsonschema validator of ``root`` that reads schemas as this compiler does.

    The enum filter (:meth:`_Compiler._valid`) checks values against schemas the
    compiler wrote: merged and negated forms with the internal keywords, ``prefixItems``
    and numeric ``exclusiveMinimum`` in any draft.  A plain validator of the root's
    draft would ignore what it does not know and pass values the grammar must not
    take, so those keywords are judged here as the compiler compiles them:
    ``prefixItems``/``items``/``additionalItems`` as :func:`_positions` reads them,
    both forms of the exclusive bounds, ``dependencies``, ``dependentRequired`` and
    ``dependentSchemas`` in every draft, and the internal keywords.  A ``$schema`` in a
    subschema does not switch drafts (the compiler reads the root's).  Schemas are
    judged with :meth:`evolve`, so ``$ref`` resolves in the root, as it compiles.
    """
    import jsonschema
    from jsonschema.exceptions import ValidationError

    def number(x: Any) -> bool:
        return _numbers(x)

    def integral(x: Any) -> bool:
        return isinstance(x, int) or x.is_integer()

    def also_strings(validator: Any, regexes: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if isinstance(instance, str):
            text = json.dumps(instance).encode()
            if not all(compile_regex(r).fullmatch(text) for r in regexes):
                yield ValidationError(f"{instance!r} is outside a string language")

    def not_strings(validator: Any, regexes: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if isinstance(instance, str):
            text = json.dumps(instance).encode()
            if any(compile_regex(r).fullmatch(text) for r in regexes):
                yield ValidationError(f"{instance!r} is in an excluded string language")

    def not_integers(validator: Any, texts: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if number(instance) and integral(instance) and str(int(instance)) in texts:
            yield ValidationError(f"{instance!r} is an excluded integer")

    def fractional(validator: Any, flag: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if flag is True and number(instance) and integral(instance):
            yield ValidationError(f"{instance!r} is integral")

    def not_multiples(validator: Any, steps: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if number(instance) and any(_is_multiple(instance, m) for m in steps):
            yield ValidationError(f"{instance!r} is an excluded multiple")

    def some_additional(validator: Any, some: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if not isinstance(instance, dict):
            return
        matchers = [compile_regex(ecma_pattern(p)) for p in some["patterns"]]
        for k, v in instance.items():
            if k in some["names"] or any(m.fullmatch(json.dumps(k).encode()) for m in matchers):
                continue
            if next(validator.descend(v, some["schema"]), None) is None:
                return
        yield ValidationError(f"{instance!r} has no additional member that matches")

    def items(validator: Any, its: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if not isinstance(instance, list):
            return
        prefix, rest = _positions(schema)
        for i, x in enumerate(instance):
            yield from validator.descend(x, prefix[i] if i < len(prefix) else rest, path=i)

    def positional(validator: Any, its: Any, instance: Any, schema: dict) -> Iterator[Any]:
        return iter(())  # (prefixItems, additionalItems: judged with items, or alone below)

    def prefix_only(validator: Any, its: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if "items" in schema:
            return  # judged with items
        yield from items(validator, None, instance, schema)

    def bound(kw: str) -> Any:
        def check(validator: Any, limit: Any, instance: Any, schema: dict) -> Iterator[Any]:
            if not number(instance) or not number(limit):
                return  # (a boolean exclusiveMinimum is draft 4's flag on minimum)
            strict = kw.startswith("exclusive") or schema.get("exclusive" + kw[0].upper() + kw[1:]) is True
            low = "inimum" in kw
            if (instance < limit or (strict and instance == limit)) if low else \
                    (instance > limit or (strict and instance == limit)):
                yield ValidationError(f"{instance!r} is out of bounds ({kw} {limit!r})")
        return check

    def dependencies(validator: Any, deps: Any, instance: Any, schema: dict) -> Iterator[Any]:
        if not isinstance(instance, dict) or not isinstance(deps, dict):
            return
        for name, need in deps.items():
            if name not in instance:
                continue
            if isinstance(need, list):
                if any(r not in instance for r in need):
                    yield ValidationError(f"{name!r} needs {need!r}")
            else:
                yield from validator.descend(instance, need)

    base = jsonschema.validators.validator_for(root)
    cls = jsonschema.validators.extend(base, {
        ALSO_STRINGS: also_strings, NOT_STRINGS: not_strings, NOT_INTEGERS: not_integers, FRACTIONAL: fractional,
        NOT_MULTIPLES: not_multiples, SOME_ADDITIONAL: some_additional,
        "items": items, "prefixItems": prefix_only, "additionalItems": positional,
        **{kw: bound(kw) for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")},
        **{kw: dependencies for kw in ("dependencies", "dependentRequired", "dependentSchemas")},
    })
    evolve = cls.evolve

    def same_draft(self: Any, **changes: Any) -> Any:
        schema = changes.get("schema", self.schema)
        if isinstance(schema, dict) and "$schema" in schema:
            changes["schema"] = {k: v for k, v in schema.items() if k != "$schema"}
        return evolve(self, **changes)

    cls.evolve = same_draft
    return cls(root, format_checker=cls.FORMAT_CHECKER)


_MAX_UNIQUE_SETS = 4096  # most sets of used values uniqueItems may track (rules of the grammar)
_MAX_VALUE_NODES = 256  # most values (items and members counted) a negated enum's arrays and objects may hold


def _value_nodes(v: Any) -> int:
    """How many values ``v`` holds, itself included."""
    if isinstance(v, list):
        return 1 + sum(_value_nodes(x) for x in v)
    if isinstance(v, dict):
        return 1 + sum(_value_nodes(x) for x in v.values())
    return 1


def _canonical(x: Any) -> Any:
    """``x`` with its integral numbers as integers (as ``json.dumps`` writes those)."""
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, list):
        return [_canonical(y) for y in x]
    if isinstance(x, dict):
        return {k: _canonical(y) for k, y in x.items()}
    return x


def _group_by_value(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, list]]:
    """``(value, item)`` pairs grouped by equal values (1 and 1.0 alike, never true
    and 1): ``(the value, canonical, its items)``."""
    groups: dict[str, tuple[Any, list]] = {}
    for v, item in pairs:
        c = _canonical(v)
        groups.setdefault(json.dumps(c, sort_keys=True), (c, []))[1].append(item)
    return list(groups.values())


# keywords that read each other, left out together where an outline merge leaves one out
_OUTLINE_GROUPS = (("patternProperties", "additionalProperties"), ("items", "prefixItems", "additionalItems"),
                   ("contains", "minContains", "maxContains"))


def _count_problem(value: Any) -> str | None:
    """Why ``value`` is no count (``minLength``, ``maxItems``, ...): a count is a
    non-negative integer, and JSON Schema's integers include 2.0; None when it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a non-negative integer"
    if isinstance(value, float) and not value.is_integer():
        return "must be a non-negative integer (a count has no fraction)"
    if value < 0:
        return "must be a non-negative integer"
    return None


def _count_of(keyword: str, value: Any, pointer: str) -> int:
    """The count ``keyword: value`` (at ``pointer``) as an int, or :class:`InvalidSchema`
    (never rounded: ``maxLength: 2.5`` has no meaning to keep)."""
    problem = _count_problem(value)
    if problem:
        raise InvalidSchema(keyword, pointer, problem, value)
    return int(value)


def _located(e: LimitExceeded, pointer: str) -> LimitExceeded:
    """``e`` with the JSON pointer of the schema where it fired: ``e.pointer``, and
    ``at POINTER`` in its detail (once: the innermost schema's)."""
    if getattr(e, "pointer", None) is None:
        where = f"at {pointer or '/'}"
        LimitExceeded.__init__(e, e.limit, e.value, e.maximum, f"{e.detail}; {where}" if e.detail else where)
        e.pointer = pointer  # type: ignore[attr-defined]
    return e


def _tick(where: str) -> None:
    """:func:`~toolkit.core.errors.check_deadline` at a loop head of the compiler;
    ``where`` (a JSON pointer) goes into the error, and is its ``pointer``."""
    try:
        check_deadline(where or "/")
    except TimeLimitExceeded as e:
        e.pointer = where  # type: ignore[attr-defined]
        raise


def _annotations_only(node: dict) -> bool:
    """A schema object with no keyword that constrains a value (each one is an
    annotation, ignored as the spec says): it accepts every value."""
    return not any(k in _VALIDATION or k == _ANY_LISTS for k in node)


def _branch_lists(node: dict) -> list[list]:
    """The non-empty anyOf and oneOf lists of a (flat, or outline) schema: a value it
    takes matches a branch of each."""
    lists = [node[kw] for kw in ("oneOf", "anyOf") if isinstance(node.get(kw), list) and node[kw]]
    return lists + [x for x in node.get(_ANY_LISTS, ()) if isinstance(x, list) and x]


def _conjuncts(node: Any) -> list:
    """The schemas whose conjunction ``node`` is (an ``allOf`` and nothing else: its parts)."""
    if isinstance(node, dict) and set(node) == {"allOf"} and isinstance(node["allOf"], list):
        return [c for part in node["allOf"] for c in _conjuncts(part)]
    return [node]


def _req(names: list[str]) -> dict:
    return {"required": names} if names else {}


def _step_fraction(step: Any) -> Fraction:
    p, s = decimal_step(step)
    return Fraction(p, 10**s)


def _is_multiple(v: Any, step: Any) -> bool:
    """``v`` is a multiple of ``step`` in exact decimal arithmetic (floats read as
    their shortest ``repr``), as JSON Schema specifies."""
    x = Fraction(Decimal(repr(v))) if isinstance(v, float) else Fraction(v)
    return (x / _step_fraction(step)).denominator == 1


def _lcm_step(a: Any, b: Any, pointer: str) -> Any:
    """The least common multiple of two ``multipleOf`` steps (a number is a multiple
    of both exactly when it is one of this), as the number the schema would write."""
    fa, fb = _step_fraction(a), _step_fraction(b)
    den = math.lcm(fa.denominator, fb.denominator)
    lcm = Fraction(math.lcm(int(fa * den), int(fb * den)), den)
    if lcm.denominator == 1:
        return int(lcm)
    as_float = float(lcm)
    if Fraction(Decimal(repr(as_float))) != lcm:
        raise UnsupportedSchema("allOf", pointer, f"the common multiple of multipleOf {a!r} and {b!r} has no exact float")
    return as_float


class _Undecided(UnsupportedSchema):
    """A question :meth:`_Compiler._flat` does not answer here (a node met again while
    it is being merged, or merges nested too deeply); its readers take it as "maybe"."""


class _NoValue(Exception):
    """Merging two keywords left no value (two different consts)."""


def _json_same(a: Any, b: Any) -> bool:
    """Equal as JSON values, as JSON Schema compares them: numbers by value (1 and 1.0
    alike), never a boolean for a number, arrays item by item, objects key by key."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _positions(part: dict) -> tuple[list, Any]:
    """An array schema's items by position: its prefix (``prefixItems``, or the draft
    4-2019 list form of ``items``), and the schema of every item after it."""
    items = part.get("items")
    if isinstance(items, list):
        return items, part.get("additionalItems", True)
    prefix = part.get("prefixItems")
    return (list(prefix) if isinstance(prefix, list) else []), (True if items is None else items)


def _all_of(schemas: list[Any]) -> Any:
    kept = [s for s in schemas if s is not True]
    return True if not kept else kept[0] if len(kept) == 1 else {"allOf": kept}


def _merge_positions(parts: list[dict]) -> dict:
    """``prefixItems`` and ``items`` of the conjunction of array schemas: position k
    must match every part's schema for position k (its prefix's, or its ``items``)."""
    views = [_positions(p) for p in parts]
    n = max(len(pre) for pre, _ in views)
    prefix = [_all_of([pre[k] if k < len(pre) else rest for pre, rest in views]) for k in range(n)]
    rest = _all_of([rest for _, rest in views])
    out: dict[str, Any] = {"prefixItems": prefix} if prefix else {}
    if rest is not True:
        out["items"] = rest
    return out


_EMPTY_RANGES = (("minLength", "maxLength", False), ("minimum", "maximum", False),
                 ("exclusiveMinimum", "maximum", True), ("minimum", "exclusiveMaximum", True),
                 ("exclusiveMinimum", "exclusiveMaximum", True), ("minItems", "maxItems", False),
                 ("minProperties", "maxProperties", False), ("minContains", "maxContains", False))


def _empty_keyword(node: Any) -> str:
    """The keyword that most likely leaves no value for ``node`` (for Unsatisfiable's
    message; the grammar has already proved the language empty)."""
    if node is False:
        return "false"
    if not isinstance(node, dict):
        return "schema"
    for lo, hi, strict in _EMPTY_RANGES:
        a, b = node.get(lo), node.get(hi)
        if _numbers(a, b) and (a >= b if strict else a > b):
            return lo
    if node.get("not") in ({}, True):
        return "not"
    props, required = node.get("properties", {}), node.get("required", [])
    if (node.get("additionalProperties") is False and not node.get("patternProperties") and isinstance(props, dict)
            and _numbers(node.get("minProperties", 0)) and node.get("minProperties", 0) > len(props)):
        return "minProperties"  # more members than a closed object has
    prefix = node.get("prefixItems")
    if (node.get("items") is False and isinstance(prefix, list) and _numbers(node.get("minItems", 0))
            and node.get("minItems", 0) > len(prefix)):
        return "minItems"  # more items than a closed tuple has
    if isinstance(props, dict) and isinstance(required, list):
        if any(props.get(r) is False for r in required if isinstance(r, str)):
            return "required"
        if node.get("additionalProperties") is False and any(r not in props for r in required):
            return "required"
    for k in ("enum", "const", "$ref", "allOf", "oneOf", "anyOf", "type", "pattern", "format"):
        if k in node:
            return k
    return "schema"


_GROUPS = (("properties", "patternProperties", "additionalProperties"), ("items", "prefixItems", "additionalItems"),
           ("contains", "minContains", "maxContains"), ("if", "then", "else"))


def _reduce_against(b: dict, a: dict) -> dict:
    """``b`` without the keywords ``a`` has verbatim (a implies them, so a and not b
    is a and not the rest); keywords that read each other go as a group."""
    if "unevaluatedProperties" in a or "unevaluatedProperties" in b or "unevaluatedItems" in a or "unevaluatedItems" in b:
        return b
    out = dict(b)
    grouped = {k for g in _GROUPS for k in g}
    for g in _GROUPS:
        if any(k in b for k in g) and all((k in a) == (k in b) and (k not in b or _json_same(a[k], b[k])) for k in g):
            for k in g:
                out.pop(k, None)
    for k, v in b.items():
        if k in grouped or k not in _VALIDATION:
            continue
        if k in a and _json_same(a[k], v):
            out.pop(k)
    return out


def _covers_type(node: dict, t: str) -> bool:
    """``node`` accepts every value of type ``t`` (null or boolean): it allows the type
    and has no keyword that could constrain it."""
    if t not in ("null", "boolean"):
        return False
    ty = node.get("type")
    if ty is not None and t not in (ty if isinstance(ty, list) else [ty]):
        return False
    return not any(k in node for k in ("enum", "const", "not", "anyOf", "oneOf", "allOf", "$ref", "if",
                                       "$dynamicRef", "$recursiveRef"))


def _forbids(node: dict, name: str) -> bool:
    """``node`` (an object schema) rejects every object that has property ``name``."""
    props = node.get("properties", {})
    if isinstance(props, dict) and name in props:
        return props[name] is False
    pats = node.get("patternProperties") or {}
    if pats:
        return False  # (a pattern might match the name; not worth deciding here)
    return node.get("additionalProperties", True) is False


def _ranges_apart(a: dict, b: dict, lo_kw: str, hi_kw: str) -> bool:
    """The [min, max] count ranges of ``a`` and ``b`` do not meet."""
    la, ha, lb, hb = a.get(lo_kw, 0), a.get(hi_kw), b.get(lo_kw, 0), b.get(hi_kw)
    if not _numbers(la, lb) or (ha is not None and not _numbers(ha)) or (hb is not None and not _numbers(hb)):
        return False
    return (ha is not None and ha < lb) or (hb is not None and hb < la)


def _bounds(node: dict) -> tuple[tuple[float, bool] | None, tuple[float, bool] | None]:
    """((low, exclusive), (high, exclusive)) of a number schema (draft-6 form)."""
    lo = hi = None
    if _numbers(node.get("minimum")):
        lo = (node["minimum"], False)
    if _numbers(node.get("exclusiveMinimum")) and (lo is None or node["exclusiveMinimum"] >= lo[0]):
        lo = (node["exclusiveMinimum"], True)
    if _numbers(node.get("maximum")):
        hi = (node["maximum"], False)
    if _numbers(node.get("exclusiveMaximum")) and (hi is None or node["exclusiveMaximum"] <= hi[0]):
        hi = (node["exclusiveMaximum"], True)
    return lo, hi


def _before(hi: tuple[float, bool] | None, lo: tuple[float, bool] | None) -> bool:
    """Every number under ``hi`` is below every number over ``lo``."""
    if hi is None or lo is None:
        return False
    return hi[0] < lo[0] or (hi[0] == lo[0] and (hi[1] or lo[1]))


def _draft4_bounds(part: dict) -> dict:
    """Draft 4's boolean ``exclusiveMinimum``/``exclusiveMaximum`` in the numeric form."""
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(part.get(flag), bool):
            if part[flag] and bound in part:
                part[flag] = part.pop(bound)
            else:
                del part[flag]
    return part


def _int_texts(v: Any) -> list[str]:
    """The canonical JSON texts of an integral value (0 is also written -0)."""
    n = int(v)
    return ["0", "-0"] if n == 0 else [str(n)]


def _numbers(*xs: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)


@functools.lru_cache(maxsize=4096)  # a pure string helper, called per rule: no scope
def _rule_base(hint: str) -> str:
    """A rule name's stem from its hint (a property name, a keyword)."""
    return re.sub(r"[^a-z0-9]+", "_", hint.lower()).strip("_")[:40] or "r"


@functools.lru_cache(maxsize=4096)
def _term_base(hint: str) -> str:
    """A terminal name's stem from its hint."""
    return re.sub(r"[^A-Z0-9]+", "_", hint.upper()).strip("_") or "T"


def from_json_schema(
    schema: Any,
    *,
    whitespace: str = "flexible",
    strict: bool = True,
    max_rules: int = DEFAULT_MAX_RULES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    property_order: str = "schema",
    spelling: str = "json",
    compile_timeout: float | None = DEFAULT_COMPILE_TIMEOUT,
    max_enum: int = DEFAULT_MAX_ENUM,
    max_enum_bytes: int = DEFAULT_MAX_ENUM_BYTES,
) -> Grammar:
    """Compile a JSON Schema (a dict, a boolean, or JSON text) to a :class:`Grammar`.

    ``whitespace="flexible"`` allows JSON whitespace between tokens,
    ``"compact"`` none.  ``strict=False`` drops keywords the compiler cannot express
    (with a warning: the grammar is then looser than the schema).  ``max_rules`` and
    ``max_depth`` (schemas nested in schemas) bound the work: past them the compile
    raises :class:`LimitExceeded` naming where.  A schema no value satisfies raises
    :class:`Unsatisfiable` with the keyword and pointer that emptied it.
    ``property_order="any"`` lets an object's members come in any order (the
    schema's order by default, as llguidance and xgrammar write them); see
    :data:`PROPERTY_ORDERS`.  ``spelling="llguidance"`` writes strings as llguidance's
    compiler does (see :data:`SPELLINGS`).

    Bad schemas are refused before any work depends on them: a keyword value the
    spec does not allow (``maxLength: 2.5``, ``required: "a"``) raises
    :class:`~toolkit.core.errors.InvalidSchema` naming the keyword, the value and its
    JSON pointer; an unknown keyword that looks like a misspelled one (``requried``)
    is warned about.  ``max_enum`` (values in one ``enum``) and ``max_enum_bytes``
    (bytes of JSON text of all the ``enum`` and ``const`` values) raise
    :class:`LimitExceeded` up front.  ``compile_timeout`` (seconds; 0 or None: no
    limit) stops the compile cooperatively
    (:func:`~toolkit.core.errors.deadline`): :class:`~toolkit.core.errors.TimeLimitExceeded`
    naming the option and the JSON pointer it had reached.
    """
    if isinstance(schema, (str, bytes)):
        schema = _loads(schema, max_depth)
    if not isinstance(schema, (dict, bool)):
        raise UnsupportedSchema("schema", "", f"a schema must be an object or a boolean, not {type(schema).__name__}")
    for name, value in (("max_rules", max_rules), ("max_depth", max_depth), ("max_enum", max_enum),
                        ("max_enum_bytes", max_enum_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(schema, Mapping) and not isinstance(schema, dict):
        schema = dict(schema)
    compiler = _Compiler(schema, whitespace=whitespace, strict=strict, max_rules=max_rules, max_depth=max_depth,
                         property_order=property_order, spelling=spelling, max_enum=max_enum,
                         max_enum_bytes=max_enum_bytes)
    with deadline(compile_timeout, "compile_timeout"), jsontext.spelling(spelling):
        return compiler.grammar()


def _loads(text: str | bytes, max_depth: int) -> Any:
    """A schema's JSON text parsed; where it nests deeper than the parser's stack,
    :class:`LimitExceeded` (``max_depth``) at the pointer where it does (as
    :func:`_check_nesting` says of a parsed one)."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise UnsupportedSchema("schema", "", f"not JSON: {e}") from e
    except RecursionError:
        pointer, depth = _deepest_pointer(text.decode("utf-8", "replace") if isinstance(text, bytes) else text,
                                          2 * max_depth + _JSON_DEPTH_SLACK)
        raise _located(LimitExceeded("max_depth", depth, 2 * max_depth + _JSON_DEPTH_SLACK,
                                     "arrays and objects nested deeper than Python's JSON parser allows"),
                       pointer) from None


def _deepest_pointer(text: str, limit: int) -> tuple[str, int]:
    """``(the JSON pointer, the depth)`` where the arrays and objects of the JSON
    ``text`` first nest deeper than ``limit`` (else where they nest deepest), read
    without a recursive parser: keys are the strings before a colon, indices counted
    by commas."""
    path: list[Any] = []  # per open container: its key or index so far (None: an object before its first key)
    kinds: list[str] = []
    best: tuple[str, int] = ("", 0)
    i, n = 0, len(text)
    last_string = None
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            last_string = text[i:j + 1]
            i = j + 1
            continue
        if c in "[{":
            kinds.append(c)
            path.append(0 if c == "[" else None)
            if len(path) > best[1]:
                best = ("".join(f"/{_escape_pointer(str(p))}" for p in path[:-1]), len(path))
                if len(path) > limit:
                    break
        elif c in "]}":
            if path:
                path.pop()
                kinds.pop()
        elif c == ",":
            if kinds and kinds[-1] == "[":
                path[-1] += 1
        elif c == ":" and kinds and kinds[-1] == "{" and last_string is not None:
            try:
                path[-1] = json.loads(last_string)
            except ValueError:
                path[-1] = last_string.strip('"')
        i += 1
    return best


def json_schema_to_regex(
    schema: Any,
    *,
    max_depth: int = 5,
    whitespace: str = "flexible",
    strict: bool = True,
    max_length: int = 1_000_000,
    spelling: str = "json",
) -> str:
    """One regex for a JSON Schema: the input of an Outlines-style (regex → DFA) strategy.

    ``Grammar.from_json_schema(schema, whitespace=..., strict=..., spelling=...).to_regex(max_depth=...)``:
    the same language as the schema's grammar (flexible whitespace is the ``WS``
    ignore terminal, written as ``(?:[ \\t\\n\\r]+)*`` before every token and at the
    end), except that recursion (``$ref`` cycles, and containers nested in free-form
    values: ``{}``, ``true``, additional properties, which are allowed unless
    ``additionalProperties`` is false) is unrolled to ``max_depth`` nestings as
    :meth:`Grammar.to_regex` defines it.  Instances nested deeper are rejected, never
    the other way round: the regex is never looser than the grammar, and equal to it
    when the schema has no recursion.  Unbounded arrays and lists of additional
    properties are repetitions, not recursion, so they stay unbounded.

    A free-form value repeats its inner value four times per level (in objects and
    in arrays, the first element and the rest), so its text grows about 4x per
    level (some 600 kB at depth 5): past ``max_length`` characters this raises
    :class:`LimitExceeded`; close objects (``additionalProperties: false``) or lower
    ``max_depth``.
    """
    g = from_json_schema(schema, whitespace=whitespace, strict=strict, spelling=spelling)
    return g.to_regex(max_depth=max_depth, max_length=max_length)


register_schema_compiler(from_json_schema)


def _read_schema(spec: Any, **options: Any) -> Grammar:
    return from_json_schema(schema_value(spec), **options)


def _schema_case(test: Mapping[str, Any]) -> str:
    if "data" not in test:
        raise MasklabError("needs 'data' (the test instance: any JSON value)")
    return json.dumps(test["data"])  # the instance text, as MaskBench tokenizes it


register_format(InputFormat(
    "json_schema", JsonSchemaText, _read_schema, key="schema", flag="--schema", suffixes=(".json",),
    help="a JSON schema: a file, or the schema's JSON text", arg="file|json",
    title="a JSON schema (dict, bool or JsonSchemaText)",
    options=frozenset({"whitespace", "strict", "max_rules", "max_depth", "property_order", "spelling",
                       "compile_timeout", "max_enum", "max_enum_bytes"}),
    wrap=lambda value: value, accepts=lambda spec: isinstance(spec, Mapping | bool), case_text=_schema_case,
), replace=True)
