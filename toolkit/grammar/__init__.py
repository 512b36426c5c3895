"""The grammar IR every strategy compiles (:class:`Grammar`, :class:`Terminal`), the
Earley recognizer that defines a grammar's language, Lark in llguidance's dialect in and
out, special tokens as token-level terminals, and grammars written back as regexes."""

from toolkit.grammar.ir import Grammar, Terminal, grammar_from_spec, json_schema_to_regex

__all__ = ["Grammar", "Terminal", "grammar_from_spec", "json_schema_to_regex"]
