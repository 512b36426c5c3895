r"""xgrammar's structural tags (``xgrammar/structural_tag.py``, 0.2.8) read into the IR.

A structural tag is a JSON description of what a tool-calling model may write: free
text, triggers that open a tagged region, the region's content (a JSON schema, a regex,
a constant, a token), its end.  :func:`to_lark` writes one in llguidance's Lark dialect
(:mod:`toolkit.grammar.lark_dialect`), so the same language has a form llguidance reads
and the IR is that text's (:func:`read_structural_tag`).  The elements:

* ``const_string``, ``regex``, ``json_schema`` (its default ``style="json"``, as
  ``%json``, closed as xgrammar closes it: :func:`strict_schema`; the XML styles of
  :data:`XML_STYLES` for an object of plain, enum and JSON-typed properties), ``token`` (an id, or a special token's name ``<...>``), ``exclude_token``
  and ``any_tokens`` (ids), ``sequence``, ``or``, ``optional``, ``plus``, ``star``,
  ``repeat``, ``tag`` (its ``end`` a string, a list or a token) and
  ``tags_with_separator``; ``grammar`` (xgrammar's EBNF, read as GBNF by
  :mod:`toolkit.grammar.gbnf` and nested as ``%lark { ... }``);
* text that ends at a string (``any_text`` as a tag's content: up to the tag's end;
  ``triggered_tags`` and ``dispatch``: up to a trigger) is a lazy lexeme with that
  suffix (llguidance's ``[suffix=...]``): it ends where the string first appears, as
  xgrammar's text does; ``excludes`` take the strings out of the text (``& ~``);
* ``token_triggered_tags`` and ``token_dispatch``: token-level text (``<[^ids]>*``)
  until a trigger token.

``any_text``'s ``max_chars`` bounds the text's code points; its ``max_tokens`` is written
as llguidance's ``max_tokens`` attribute (``peer:llguidance`` honours it; masklab's
strategies, which follow bytes, refuse it).  A ``json_schema``'s ``excludes`` are read where they can be exactly: out of an XML
style's plain string text (and its ``enum`` values), and over JSON values that hold no
free string (only checked there).

Refused with :class:`~toolkit.core.errors.UnsupportedGrammar` naming the element and its
JSON pointer: ``json_schema``
styles other than ``json`` and :data:`XML_STYLES` (each an XML argument syntax of one
model family: ``cohere_xml`` and ``minimax_m3_xml`` nest objects and lists as elements),
an XML style's string with other keywords than ``enum``, and a schema's
``any_order`` (which loosens required keys by design), ``max_whitespace_cnt`` beside
an XML style (the json style's is read: whitespace runs of at most that many characters
between the value's tokens), ``excludes`` over free JSON strings, token names that are
not written ``<...>`` and names where ids are needed, ``any_text`` anywhere but a tag's
content or the end of the format.  A malformed tag is a
:class:`~toolkit.core.errors.GrammarError` with its pointer.

Where the reading differs from xgrammar 0.2.8's (``peer:xgrammar`` compiles the tag
itself; ``tests/test_structural_tag.py`` checks the IR's masks inside its masks on
Llama 3, and every element's verdicts equal to its own):

* free text is UTF-8 text here; xgrammar's also takes byte strings that are not UTF-8
  (on Llama 3, 284 tokens such as a lone continuation byte);
* a ``patternProperties`` object is read by JSON Schema here; xgrammar closes it
  (it refuses ``{"x1": 1}`` for ``{"patternProperties": {"^x": ...}}``);
* a ``json_schema`` is ``%json``, its strings spelled as llguidance spells them (no
  ``\/``, ``\u`` escapes of controls only, no DEL); xgrammar's JSON strings take those
  too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from toolkit.core.errors import GrammarError, UnsupportedGrammar
from toolkit.grammar.embed import map_subschemas
from toolkit.grammar.inputs import InputFormat, register_format
from toolkit.grammar.ir import Grammar

__all__ = ["StructuralTagText", "to_lark", "read_structural_tag", "strict_schema", "ELEMENTS", "XML_STYLES",
           "NESTED_XML_STYLES"]

ELEMENTS = ("const_string", "regex", "json_schema", "grammar", "any_text", "token", "exclude_token", "any_tokens",
            "sequence", "or", "optional", "plus", "star", "repeat", "tag", "triggered_tags",
            "token_triggered_tags", "tags_with_separator", "dispatch", "token_dispatch")
"""The element types of xgrammar 0.2.8's structural tags."""

_ANY = "/(.|\\n)*/"
_MAX_CHARS = 4096  # any_text's max_chars read (a DFA state per character)
_SPECIAL_NAME = re.compile(r"<[^<>\s]+>")


@dataclass(frozen=True)
class StructuralTagText:
    """A structural tag (the JSON object ``{"type": "structural_tag", "format": ...}``,
    or its format alone) for an engine that reads it itself (``peer:xgrammar``);
    masklab's strategies are given :func:`read_structural_tag`'s IR."""

    #: the input format's name (:mod:`toolkit.grammar.inputs`)
    input_format: ClassVar[str] = "structural_tag"
    value: Any

    @property
    def text(self) -> str:
        return json.dumps(self.value) if not isinstance(self.value, str) else self.value

    def __hash__(self) -> int:  # (its value is a dict: hashed by its text)
        return hash(self.text)


def read_structural_tag(spec: Any) -> Grammar:
    """The IR of a structural tag (:class:`StructuralTagText`, a dict or its JSON text)."""
    return Grammar.from_lark(to_lark(spec))


def to_lark(spec: Any) -> str:
    """The structural tag ``spec`` in llguidance's Lark dialect (see the module doc)."""
    if isinstance(spec, StructuralTagText):
        spec = spec.value
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise GrammarError(f"a structural tag must be JSON: {e.msg}", e.lineno, e.colno) from None
    if not isinstance(spec, Mapping):
        raise GrammarError(f"a structural tag is a JSON object, not {type(spec).__name__}")
    fmt, where = spec, ""
    if spec.get("type") == "structural_tag":
        fmt, where = spec.get("format"), "/format"
    w = _Writer()
    try:
        top = w.element(fmt, where, last=True)
    except RecursionError as e:  # the writer follows the elements' nesting
        raise GrammarError("a structural tag nested too deeply to read (a few hundred levels at most)") from e
    return "\n".join([f"start: {top}", *w.lines]) + "\n"


def _lit(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _rx_lit(s: str) -> str:
    """``s`` as a regex body inside ``/.../``, on one line (control characters as ``\\xHH``)."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or c == "\x7f" else "\\/" if c == "/" else re.escape(c)
                   for c in s)


def _one_line(rx: str) -> str:
    """A regex with its control characters written as ``\\xHH`` (a raw newline would end
    the Lark line it stands on)."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", rx)


class _Writer:
    """The rules and terminals of one structural tag, named ``st_N`` / ``ST_N``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def name(self, upper: bool = False) -> str:
        self.n += 1
        return f"{'ST' if upper else 'st'}_{self.n}"

    def rule(self, body: str, attrs: str = "") -> str:
        name = self.name()
        self.lines.append(f"{name}{attrs}: {body}")
        return name

    def terminal(self, body: str) -> str:
        name = self.name(upper=True)
        self.lines.append(f"{name}: {body}")
        return name

    # ------------------------------------------------------------------ elements --

    def element(self, fmt: Any, where: str, last: bool = False) -> str:
        """A rule for ``fmt`` (at JSON pointer ``where``); ``last``: nothing follows it
        (free text may run to the end)."""
        if not isinstance(fmt, Mapping) or not isinstance(fmt.get("type"), str):
            raise GrammarError(f"structural tag at {where or '/'}: an element is an object with a 'type'")
        kind = fmt["type"]
        method = getattr(self, f"_{kind}", None)
        if kind not in ELEMENTS or method is None:
            raise UnsupportedGrammar(f"structural tag at {where or '/'}: the element type {kind!r} is not one of "
                                     f"xgrammar's ({', '.join(ELEMENTS)})" if kind not in ELEMENTS else
                                     f"structural tag at {where or '/'}: the {kind!r} element is not read yet")
        return method(fmt, where, last)

    def _const_string(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        value = _field(fmt, "value", str, where)
        return self.rule(_lit(value) if value else "")

    def _regex(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        pattern = _field(fmt, "pattern", str, where)
        return self.rule("/" + _one_line(pattern.replace("/", "\\/")) + "/")

    def _json_schema(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        schema = fmt.get("json_schema")
        if not isinstance(schema, (bool, Mapping)):
            raise GrammarError(f"structural tag at {where}/json_schema: a JSON schema (an object or a boolean)")
        style = fmt.get("style", "json")
        if style != "json" and style not in XML_STYLES and style not in NESTED_XML_STYLES:
            raise UnsupportedGrammar(f"structural tag at {where}/style: the json_schema style {style!r} (an XML "
                                     f"argument syntax) is not read; json, {', '.join(XML_STYLES)} and "
                                     f"{', '.join(NESTED_XML_STYLES)} are")
        if fmt.get("any_order", False) is not False:
            raise UnsupportedGrammar(f"structural tag at {where}/any_order: a json_schema's any_order (which lets "
                                     "required keys go missing) is not read")
        spaces = fmt.get("max_whitespace_cnt")
        if spaces is not None and (not isinstance(spaces, int) or isinstance(spaces, bool) or spaces < 1):
            raise GrammarError(f"structural tag at {where}/max_whitespace_cnt: a count >= 1 (as xgrammar asks), got "
                               f"{spaces!r}")
        if spaces is not None and style != "json":
            raise UnsupportedGrammar(f"structural tag at {where}/max_whitespace_cnt: read for the json style only")
        excludes = _strings(fmt, "excludes", where)
        if style in NESTED_XML_STYLES:
            if excludes:
                raise UnsupportedGrammar(f"structural tag at {where}/excludes: {style} takes no excludes (xgrammar "
                                         "refuses them)")
            return self._nested_object(strict_schema(schema), style, f"{where}/json_schema")
        if style != "json":
            return self._xml_args(strict_schema(schema), style, f"{where}/json_schema", excludes)
        _no_string_to_exclude(strict_schema(schema), excludes, f"{where}/json_schema")
        body = strict_schema(schema)
        if spaces is not None:  # at most that many whitespace characters in a row, between the value's tokens
            ws = {"whitespace_pattern": f"[ \\n\\r\\t]{{1,{spaces}}}"}
            body = {**body, "x-guidance": ws} if isinstance(body, Mapping) else body
        return self.rule("%json " + json.dumps(body))

    def _xml_args(self, schema: Any, style: str, where: str, excludes: Sequence[str] = ()) -> str:
        """A model family's XML arguments (:data:`XML_STYLES`), as xgrammar writes them:
        per property in the schema's order (an optional one may be left out), its open
        tag, the value, the close tag, whitespace around.  A plain string's value is raw
        text up to the close tag; an ``enum`` of strings is one of them, raw; any other
        type is JSON.  Read for a closed object of such properties only."""
        return self._xml_object(schema, style, where,
                                lambda key, sub, ws, at: self._xml_value(key, sub, style, ws, at, excludes))

    def _xml_object(self, schema: Any, style: str, where: str, value: Any) -> str:
        """A closed object's properties in the schema's order (an optional one may be left
        out), whitespace before each and after the last; ``value(key, sub, ws, pointer)``
        writes one property's tags and value."""
        bad = sorted(k for k in schema if k not in _XML_OBJECT) if isinstance(schema, Mapping) else ["(not an object)"]
        if bad or schema.get("type", "object") != "object" or schema.get("additionalProperties", False) is not False:
            raise UnsupportedGrammar(f"structural tag at {where}: {style} is read for a closed object schema of "
                                     f"properties ({', '.join(bad) or 'additionalProperties'} is not)")
        ws = self.terminal("/[ \\n\\r\\t]+/")
        required = set(schema.get("required", []))
        items = []
        for key, sub in schema.get("properties", {}).items():
            item = f"[{ws}] {value(key, sub, ws, f'{where}/properties/{key}')}"
            items.append(item if key in required else f"[{self.rule(item)}]")
        return self.rule(" ".join([*items, f"[{ws}]"]))

    def _xml_value(self, key: str, sub: Any, style: str, ws: str, where: str, excludes: Sequence[str] = ()) -> str:
        """One property of :meth:`_xml_args`: its open tag, value and close tag.
        ``excludes``: substrings a plain string's text may not hold (an ``enum`` keeps the
        values without them, as xgrammar does)."""
        if not isinstance(sub, Mapping):
            raise UnsupportedGrammar(f"structural tag at {where}: a {style} value's schema is an object")
        if any(e in key for e in excludes):
            raise UnsupportedGrammar(f"structural tag at {where}: the property name {key!r} holds an excluded string")
        opener, close, enum_ws = XML_STYLES[style]
        keys = set(sub) - {"description", "title"}
        end = _lit(close)
        if sub.get("type") == "string" and keys == {"type"}:  # raw text up to the close tag
            return f"{opener(key, sub, ws)} {self.rule(self._text(excludes, ()), f'[suffix={end}]')}"
        if sub.get("type") == "string" and keys == {"type", "enum"} and all(isinstance(v, str) for v in sub["enum"]):
            pad = f"[{ws}]" if enum_ws else ""
            values = [v for v in sub["enum"] if not any(e in v for e in excludes)]
            if not values:
                raise GrammarError(f"structural tag at {where}/enum: every value holds an excluded string")
            return f"{opener(key, sub, ws)} {pad} ({' | '.join(_lit(v) for v in values)}) {pad} {end}"
        if sub.get("type") in ("integer", "number", "boolean", "null", "object", "array"):
            _no_string_to_exclude(sub, excludes, where)
            return f"{opener(key, sub, ws)} [{ws}] {self.rule('%json ' + json.dumps(sub))} [{ws}] {end}"
        raise UnsupportedGrammar(f"structural tag at {where}: a {style} value of this schema (a string with "
                                 f"{', '.join(sorted(keys - {'type'})) or 'no type'}) is not read yet")

    # cohere_xml and minimax_m3_xml write objects and lists as nested elements, a value's
    # JSON type in cohere's open tag; read from the grammars xgrammar 0.2.8 builds for them

    def _nested_object(self, schema: Any, style: str, where: str) -> str:
        """A closed object in a nested style (:meth:`_xml_object`): cohere's
        ``<cofl:value name="key"`` and its typed value (:meth:`_cohere_typed`), or
        minimax's ``]<]minimax[>[<key>`` and its value (:meth:`_m3_value`)."""

        def value(key: str, sub: Any, ws: str, at: str) -> str:
            if style == "cohere_xml":
                if any(c in key for c in '"&<>'):
                    raise UnsupportedGrammar(f"structural tag at {at}: a cohere_xml name with a character XML escapes")
                return f"{_lit('<cofl:value name=' + chr(34) + key + chr(34))} {self._cohere_typed(sub, ws, at)}"
            return f"{_lit(f'{_M3_MARK}<{key}>')} {self._m3_value(sub, ws, key, at)}"

        return self._xml_object(schema, style, where, value)

    def _cohere_typed(self, sub: Any, ws: str, where: str) -> str:
        """cohere_xml after ``<cofl:value[ name="..."]``: the type attribute, the value and
        the close tag: ``raw`` text (or an ``enum`` of strings), ``json`` scalars, ``dict``
        objects and ``list`` arrays (their items unnamed elements)."""
        close = _lit("</cofl:value>")
        kind = self._value_kind(sub, "cohere_xml", where)
        if kind == "text":
            return f"{_COHERE['raw']} {self.rule(_ANY, f'[suffix={close}]')}"
        if kind == "enum":
            return f"{_COHERE['raw']} [{ws}] ({' | '.join(_lit(v) for v in sub['enum'])}) [{ws}] {close}"
        if kind == "object":
            inner = self._nested_object(sub, "cohere_xml", where)
            return f"{_COHERE['dict']} [{ws}] {inner} [{ws}] {close}"
        if kind == "array":
            one = f"{_lit('<cofl:value')} {self._cohere_typed(sub.get('items', {}), ws, f'{where}/items')}"
            return f"{_COHERE['list']} [{ws}] [({self.rule(one)})+ [{ws}]] {close}"
        return f"{_COHERE['json']} [{ws}] {self.rule('%json ' + json.dumps(sub))} [{ws}] {close}"

    def _m3_value(self, sub: Any, ws: str, key: str, where: str) -> str:
        """minimax_m3_xml after ``]<]minimax[>[<key>``: the value and the close tag: text
        up to the mark, an ``enum`` of strings, JSON scalars (no whitespace), objects as
        nested properties, arrays as ``<item>`` elements."""
        mark = _M3_MARK
        close = _lit(f"{mark}</{key}>")
        kind = self._value_kind(sub, "minimax_m3_xml", where)
        if kind == "text":
            return f"{self.rule(_ANY, f'[suffix={_lit(mark)}]')} {_lit(f'</{key}>')}"
        if kind == "enum":
            return f"({' | '.join(_lit(v) for v in sub['enum'])}) {close}"
        if kind == "object":
            return f"{self._nested_object(sub, 'minimax_m3_xml', where)} {close}"
        if kind == "array":
            one = f"[{ws}] {_lit(f'{mark}<item>')} {self._m3_value(sub.get('items', {}), ws, 'item', f'{where}/items')}"
            return f"[{self.rule(f'{one} ({one})* [{ws}]')}] {close}"
        return f"{self.rule('%json ' + json.dumps(sub))} {close}"

    @staticmethod
    def _value_kind(sub: Any, style: str, where: str) -> str:
        """How a nested style writes a value of ``sub``: ``text``, ``enum``, ``object``,
        ``array`` or ``json`` (a scalar); other schemas refused."""
        if not isinstance(sub, Mapping):
            raise UnsupportedGrammar(f"structural tag at {where}: a {style} value's schema is an object")
        keys = set(sub) - {"description", "title"}
        kind = sub.get("type")
        if kind == "string" and keys == {"type"}:
            return "text"
        if kind == "string" and keys == {"type", "enum"} and all(isinstance(v, str) for v in sub["enum"]):
            return "enum"
        if kind == "object" and isinstance(sub.get("properties"), Mapping):
            return "object"
        if kind == "array" and keys <= {"type", "items"} and isinstance(sub.get("items", {}), Mapping):
            return "array"
        if kind in ("integer", "number", "boolean", "null"):
            return "json"
        raise UnsupportedGrammar(f"structural tag at {where}: a {style} value of this schema ({kind or 'no type'} "
                                 f"with {', '.join(sorted(keys - {'type'})) or 'nothing else'}) is not read yet")

    def _grammar(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        """xgrammar's EBNF (GBNF with ``root``), read by :meth:`Grammar.from_gbnf
        <toolkit.grammar.Grammar.from_gbnf>` and nested as ``%lark { ... }``: its own lexing,
        as llguidance reads a nested grammar."""
        text = _field(fmt, "grammar", str, where)
        try:
            sub = Grammar.from_gbnf(text)
        except UnsupportedGrammar as e:
            raise UnsupportedGrammar(f"structural tag at {where}/grammar: {e}") from e
        except GrammarError as e:
            raise GrammarError(f"structural tag at {where}/grammar: {e}") from e
        return self.rule("%lark {\n" + sub.to_lark() + "\n}")

    def _any_text(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        chars, tokens = self._limits(fmt, where)
        if not last:
            raise UnsupportedGrammar(f"structural tag at {where}: any_text is read as a tag's content or at the end "
                                     "of the format only (elsewhere nothing says where it ends)")
        attrs = f"[max_tokens={tokens}]" if tokens is not None else ""
        return self.rule(self._text(_strings(fmt, "excludes", where), (), chars), attrs)

    def _token(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        return self.rule(_token(fmt.get("token"), f"{where}/token"))

    def _exclude_token(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        return self.rule(_not_tokens(fmt.get("exclude_tokens", []), f"{where}/exclude_tokens"))

    def _any_tokens(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        one = _not_tokens(fmt.get("exclude_tokens", []), f"{where}/exclude_tokens")
        cap = fmt.get("max_tokens")
        if cap is None:
            return self.rule(f"({one})*")
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
            raise GrammarError(f"structural tag at {where}/max_tokens: a count >= 0, got {cap!r}")
        return self.rule(f"({one}){{0,{cap}}}" if cap else "")

    def _sequence(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        elems = _list(fmt, "elements", where)
        parts = [self.element(e, f"{where}/elements/{i}", last and i == len(elems) - 1) for i, e in enumerate(elems)]
        return self.rule(" ".join(parts))

    def _or(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        elems = _list(fmt, "elements", where)
        if not elems:
            raise GrammarError(f"structural tag at {where}/elements: an 'or' needs at least one element")
        return self.rule(" | ".join(self.element(e, f"{where}/elements/{i}", last) for i, e in enumerate(elems)))

    def _optional(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        return self.rule(f"[{self.element(fmt.get('content'), f'{where}/content', last)}]")

    def _plus(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        return self.rule(f"{self.element(fmt.get('content'), f'{where}/content')}+")

    def _star(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        return self.rule(f"{self.element(fmt.get('content'), f'{where}/content')}*")

    def _repeat(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        lo, hi = fmt.get("min"), fmt.get("max")
        if not isinstance(lo, int) or not isinstance(hi, int) or lo < 0 or (hi != -1 and hi < lo):
            raise GrammarError(f"structural tag at {where or '/'}: repeat needs 0 <= min <= max (max -1: unbounded), "
                               f"got min={lo!r} max={hi!r}")
        inner = self.element(fmt.get("content"), f"{where}/content", last and hi == 1)
        if hi == 0:
            return self.rule("")
        return self.rule(f"{inner}{{{lo},}}" if hi == -1 else f"{inner}{{{lo},{hi}}}")

    def _tag(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        begin = self._edge(fmt.get("begin"), f"{where}/begin")
        ends = fmt.get("end")
        content = fmt.get("content")
        if isinstance(content, Mapping) and content.get("type") == "any_text":
            # the text runs to the first end string, which it takes (a lazy lexeme)
            chars, tokens = self._limits(content, f"{where}/content")
            end_strings = _end_strings(ends, f"{where}/end")
            text = self._text(_strings(content, "excludes", f"{where}/content"), (), chars)
            suffix = self.terminal(" | ".join(_lit(e) for e in end_strings))
            count = f", max_tokens={tokens}" if tokens is not None else ""
            return self.rule(f"{begin} {self.rule(text, f'[suffix={suffix}{count}]')}")
        body = self.element(content, f"{where}/content")
        return self.rule(f"{begin} {body} {self._ends(ends, f'{where}/end')}")

    def _tags_with_separator(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        tags = self._tags(fmt, where)
        sep = _lit(_field(fmt, "separator", str, where))
        at_least_one, first_only = _flag(fmt, "at_least_one", where), _flag(fmt, "stop_after_first", where)
        if first_only:
            return self.rule(tags if at_least_one else f"[{tags}]")
        many = f"{tags} ({sep} {tags})*" if sep != '""' else f"{tags}+"
        return self.rule(many if at_least_one else f"[{many}]")

    def _triggered_tags(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        triggers = _strings(fmt, "triggers", where)
        if not triggers:
            raise GrammarError(f"structural tag at {where}/triggers: at least one trigger")
        tags = _list(fmt, "tags", where)
        excludes = _strings(fmt, "excludes", where)
        turns = []
        for k, trig in enumerate(triggers):
            rests = []
            for i, tag in enumerate(tags):
                begin = tag.get("begin") if isinstance(tag, Mapping) else None
                if isinstance(begin, str) and begin.startswith(trig):
                    rests.append(self._tag_after(tag, len(trig), f"{where}/tags/{i}"))
            if not rests:
                raise GrammarError(f"structural tag at {where}/triggers/{k}: no tag begins with {trig!r}")
            turns.append((trig, self.rule(" | ".join(rests))))
        return self._turns(turns, triggers, excludes, where, _flag(fmt, "at_least_one", where),
                           loop=not _flag(fmt, "stop_after_first", where))

    def _dispatch(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        rules = _list(fmt, "rules", where)
        turns = []
        for i, pair in enumerate(rules):
            if not (isinstance(pair, Sequence) and len(pair) == 2 and isinstance(pair[0], str) and pair[0]):
                raise GrammarError(f"structural tag at {where}/rules/{i}: a [pattern, format] pair")
            turns.append((pair[0], self.element(pair[1], f"{where}/rules/{i}/1")))
        return self._turns(turns, [p for p, _ in turns], _strings(fmt, "excludes", where), where, False,
                           loop=fmt.get("loop", True) is not False)

    def _token_triggered_tags(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        triggers = _ids(fmt.get("trigger_tokens", []), f"{where}/trigger_tokens")
        tags = self.rule(" | ".join(self.element(t, f"{where}/tags/{i}") for i, t in enumerate(_list(fmt, "tags", where))))
        text = self.rule(f"({_not_ids(triggers + _ids(fmt.get('exclude_tokens', []), where))})*")
        return self._repeat_turns(self.rule(f"{text} {tags}"), text, tags, _flag(fmt, "at_least_one", where),
                                  not _flag(fmt, "stop_after_first", where))

    def _token_dispatch(self, fmt: Mapping[str, Any], where: str, last: bool) -> str:
        pairs = _list(fmt, "rules", where)
        triggers, alts = [], []
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, Sequence) and len(pair) == 2):
                raise GrammarError(f"structural tag at {where}/rules/{i}: a [token, format] pair")
            (tid,) = _ids([pair[0]], f"{where}/rules/{i}/0")
            triggers.append(tid)
            alts.append(f"<[{tid}]> {self.element(pair[1], f'{where}/rules/{i}/1')}")
        text = self.rule(f"({_not_ids(triggers + _ids(fmt.get('exclude_tokens', []), where))})*")
        turn = self.rule(f"{text} ({' | '.join(alts)})")
        return self._repeat_turns(turn, text, "", False, fmt.get("loop", True) is not False)

    # ------------------------------------------------------------------- helpers --

    def _turns(self, turns: list[tuple[str, str]], triggers: list[str], excludes: list[str], where: str,
               at_least_one: bool, loop: bool) -> str:
        """Free text up to a trigger (a lazy lexeme taking it), then what the trigger
        opens; the text before the end holds no trigger.  ``at_least_one``: the output
        begins with a trigger, no text before it (xgrammar's reading); ``loop``: again
        and again, else the format ends after the first."""
        direct = self.rule(" | ".join(f"{_lit(trig)} {after}" for trig, after in turns))
        if at_least_one and not loop:  # one tag, nothing before or after it
            return direct
        body = self._text(excludes, triggers)
        alts = [f"{self.rule(body, f'[suffix={_lit(trig)}]')} {after}" for trig, after in turns]
        return self._repeat_turns(self.rule(" | ".join(alts)), self.rule(body), direct, at_least_one, loop)

    def _repeat_turns(self, turn: str, tail: str, direct: str, at_least_one: bool, loop: bool) -> str:
        """``turn``s (text then a tag) and the ``tail`` text; ``at_least_one``: the first
        is ``direct`` (a tag, no text before); not ``loop``: one turn at most."""
        if at_least_one:
            return self.rule(f"{direct} {turn}* {tail}" if loop else direct)
        return self.rule(f"{turn}* {tail}" if loop else f"{turn} | {tail}")

    def _text(self, excludes: Sequence[str], triggers: Sequence[str], max_chars: int | None = None) -> str:
        """One terminal: any text (of at most ``max_chars`` characters) holding none of
        ``excludes`` and ``triggers`` (a terminal of its own when some are given: ``&``
        stands in terminals only)."""
        banned = [s for s in (*excludes, *triggers) if s]
        text = _ANY if max_chars is None else f"/(.|\\n){{0,{max_chars}}}/"
        if not banned:
            return text
        alts = "|".join(_rx_lit(s) for s in dict.fromkeys(banned))
        return self.terminal(f"{text} & ~/(.|\\n)*({alts})(.|\\n)*/")

    def _tags(self, fmt: Mapping[str, Any], where: str) -> str:
        tags = _list(fmt, "tags", where)
        if not tags:
            raise GrammarError(f"structural tag at {where}/tags: at least one tag")
        return self.rule(" | ".join(self.element(t, f"{where}/tags/{i}") for i, t in enumerate(tags)))

    def _tag_after(self, tag: Mapping[str, Any], skip: int, where: str) -> str:
        """A tag whose begin's first ``skip`` characters were read already (a trigger)."""
        if tag.get("type") != "tag":
            raise GrammarError(f"structural tag at {where}: a triggered tag is a 'tag' element")
        rest = dict(tag)
        rest["begin"] = tag["begin"][skip:]
        return self._tag(rest, where, False)

    def _edge(self, value: Any, where: str) -> str:
        if isinstance(value, str):
            return _lit(value) if value else ""
        if isinstance(value, Mapping) and value.get("type") == "token":
            return _token(value.get("token"), f"{where}/token")
        raise GrammarError(f"structural tag at {where}: a string or a token element")

    def _ends(self, value: Any, where: str) -> str:
        if isinstance(value, list):
            return "(" + " | ".join(_lit(e) if e else '""' for e in _end_strings(value, where)) + ")"
        return self._edge(value, where)

    @staticmethod
    def _limits(fmt: Mapping[str, Any], where: str) -> tuple[int | None, int | None]:
        """``any_text``'s ``max_chars`` (code points: part of the language) and
        ``max_tokens`` (written as llguidance's ``max_tokens`` attribute, which
        ``peer:llguidance`` honours and engines that cannot count a lexeme's tokens refuse)."""
        out = []
        for key in ("max_chars", "max_tokens"):
            value = fmt.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise GrammarError(f"structural tag at {where}/{key}: a count >= 0, got {value!r}")
            if key == "max_chars" and value is not None and value > _MAX_CHARS:
                raise UnsupportedGrammar(f"structural tag at {where}/max_chars: {value} is over {_MAX_CHARS:,} (one "
                                         "DFA state per character)")
            out.append(value)
        return out[0], out[1]


def _no_string_to_exclude(schema: Any, excludes: Sequence[str], where: str) -> None:
    """``excludes`` of a JSON value are read where they change nothing: a schema with
    no free string (no ``string`` type, no untyped value, no open object) whose keys
    and constant strings hold none of them; elsewhere refused."""
    if not excludes:
        return

    def walk(node: Any, at: str) -> None:
        if isinstance(node, list):
            for i, x in enumerate(node):
                walk(x, f"{at}/{i}")
            return
        if not isinstance(node, Mapping):
            raise UnsupportedGrammar(f"structural tag at {at}: excludes over a value of any type (a free string) "
                                     "is not read yet")
        types = node.get("type")
        types = types if isinstance(types, list) else [types]
        if None in types and not any(k in node for k in ("const", "enum")) or "string" in types:
            raise UnsupportedGrammar(f"structural tag at {at}: excludes over a JSON string value is not read yet")
        if "object" in types and node.get("additionalProperties", True) is not False:
            raise UnsupportedGrammar(f"structural tag at {at}: excludes over an open object's keys is not read yet")
        for k, v in node.get("properties", {}).items():
            if any(e in k for e in excludes):
                raise UnsupportedGrammar(f"structural tag at {at}/properties: the name {k!r} holds an excluded string")
            walk(v, f"{at}/properties/{k}")
        for k in ("items", "prefixItems", "anyOf", "oneOf", "allOf"):
            if k in node and node[k] is not False:
                walk(node[k], f"{at}/{k}")
        for v in [node.get("const"), *node.get("enum", [])]:
            if any(e in json.dumps(v, ensure_ascii=False) for e in excludes):
                raise UnsupportedGrammar(f"structural tag at {at}: a constant holds an excluded string")

    walk(schema, where)


_XML_OBJECT = {"type", "properties", "required", "additionalProperties", "description", "title"}


def _dsml(space: str) -> tuple[Any, str, bool]:
    return (lambda k, sub, ws: _lit(f'<\uff5cDSML\uff5c{space}parameter name="{k}" '
                                    f'string="{str(sub.get("type") == "string").lower()}">'),
            f"</\uff5cDSML\uff5c{space}parameter>", False)


# Kimi K3 names a value's JSON type in its open tag, integers as "number"
_KIMI_TYPES = {"integer": "number", "number": "number", "string": "string", "boolean": "boolean", "null": "null",
               "object": "object", "array": "array"}

XML_STYLES: dict[str, tuple[Any, str, bool]] = {
    "qwen_xml": (lambda k, sub, ws: _lit(f"<parameter={k}>"), "</parameter>", True),
    "minimax_xml": (lambda k, sub, ws: _lit(f'<parameter name="{k}">'), "</parameter>", True),
    "glm_xml": (lambda k, sub, ws: f"{_lit(f'<arg_key>{k}</arg_key>')} [{ws}] {_lit('<arg_value>')}",
                "</arg_value>", True),
    "deepseek_xml": _dsml(""),
    "deepseek_v4_1_xml": _dsml(" "),
    "kimi_k3_xml": (lambda k, sub, ws: _lit(f'<|open|>argument key="{k}" type="{_KIMI_TYPES[sub["type"]]}"<|sep|>'),
                    "<|close|>argument<|sep|>", True),
}
"""The XML argument styles of ``json_schema`` read (xgrammar's names): per style, the open
tag of a property (its name, its schema, the whitespace terminal), the close tag, and
whether an ``enum`` value may have whitespace around it."""

NESTED_XML_STYLES = ("cohere_xml", "minimax_m3_xml")
_COHERE = {t: _lit(' type="' + t + '">') for t in ("raw", "json", "dict", "list")}  # cohere's type attributes
_M3_MARK = "]<]minimax[>["  # what opens each of minimax_m3's tags
"""The XML argument styles that nest objects and arrays as elements, a value's type in
cohere's open tag (``_Writer._nested_object``)."""

def strict_schema(schema: Any) -> Any:
    """``schema`` as xgrammar reads a structural tag's (its ``strict_mode``): an object
    schema with ``properties`` and no ``additionalProperties`` (nor pattern or unevaluated
    ones) is closed, a ``prefixItems`` without ``items`` takes no more items; every
    subschema alike.  (xgrammar leaves ``{"type": "object"}`` without properties open.)"""

    def close(node: dict[str, Any]) -> dict[str, Any]:
        if "properties" in node and not any(k in node for k in ("additionalProperties", "patternProperties",
                                                                 "unevaluatedProperties")):
            node["additionalProperties"] = False
        if "prefixItems" in node and not any(k in node for k in ("items", "additionalItems", "unevaluatedItems")):
            node["items"] = False
        return node

    return map_subschemas(schema, close)


def _field(fmt: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = fmt.get(key)
    if not isinstance(value, kind):
        raise GrammarError(f"structural tag at {where}/{key}: a {kind.__name__} is needed, got {value!r}")
    return value


def _list(fmt: Mapping[str, Any], key: str, where: str) -> list[Any]:
    return list(_field(fmt, key, list, where))


def _flag(fmt: Mapping[str, Any], key: str, where: str) -> bool:
    value = fmt.get(key, False)
    if not isinstance(value, bool):
        raise GrammarError(f"structural tag at {where}/{key}: true or false, got {value!r}")
    return value


def _strings(fmt: Mapping[str, Any], key: str, where: str) -> list[str]:
    values = fmt.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise GrammarError(f"structural tag at {where}/{key}: a list of strings, got {values!r}")
    return values


def _end_strings(value: Any, where: str) -> list[str]:
    ends = [value] if isinstance(value, str) else value
    if not isinstance(ends, list) or not ends or not all(isinstance(e, str) for e in ends):
        raise UnsupportedGrammar(f"structural tag at {where}: text content ends at end strings (a string or a "
                                 f"list of them), not {value!r}")
    if "" in ends:
        raise UnsupportedGrammar(f"structural tag at {where}: text content with an empty end string never ends")
    return ends


def _token(token: Any, where: str) -> str:
    if isinstance(token, int) and not isinstance(token, bool) and token >= 0:
        return f"<[{token}]>"
    if isinstance(token, str) and _SPECIAL_NAME.fullmatch(token):
        return token
    raise UnsupportedGrammar(f"structural tag at {where}: the token {token!r} (an id, or a special token's name "
                             "written <...>, is read)")


def _ids(tokens: Any, where: str) -> list[int]:
    if not isinstance(tokens, list):
        raise GrammarError(f"structural tag at {where}: a list of token ids")
    out = []
    for i, t in enumerate(tokens):
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise UnsupportedGrammar(f"structural tag at {where}/{i}: the token {t!r} (token ids are read here, "
                                     "not names)")
        out.append(t)
    return out


def _not_ids(ids: Sequence[int]) -> str:
    return f"<[^{','.join(str(i) for i in sorted(set(ids)))}]>" if ids else "<[*]>"


def _not_tokens(tokens: Any, where: str) -> str:
    return _not_ids(_ids(tokens, where))


def _read_spec(spec: Any) -> Grammar:
    return read_structural_tag(spec)


register_format(InputFormat(
    "structural_tag", StructuralTagText, _read_spec, key="structural_tag", flag="--structural-tag",
    suffixes=(".stag.json",), help="an xgrammar structural tag (a JSON file)", title="a structural tag "
    "(StructuralTagText)", wrap=StructuralTagText), replace=True)
