"""The grammar IR every strategy compiles (:class:`Grammar`, :class:`Terminal`), the
Earley recognizer that defines a grammar's language, Lark in llguidance's dialect in and
out, special tokens as token-level terminals, and grammars written back as regexes.
(A JSON Schema's regex, :func:`toolkit.jsonschema.json_schema_to_regex`, is a floor up.)"""

from toolkit.grammar.ir import Grammar, RegexText, Terminal, grammar_from_spec, untold_text

__all__ = ["Grammar", "RegexText", "Terminal", "grammar_from_spec", "untold_text"]
