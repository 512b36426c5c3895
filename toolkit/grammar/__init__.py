"""The grammar IR every strategy compiles (:class:`Grammar`, :class:`Terminal`), the
Earley recognizer that defines a grammar's language, the input formats (the registry of
:mod:`toolkit.grammar.inputs`: Lark in llguidance's dialect, regex, GBNF, xgrammar's
structural tags; JSON Schema
registers from a floor up), special tokens as token-level terminals, and grammars written
back as Lark, GBNF or regexes.
(A JSON Schema's regex, :func:`toolkit.jsonschema.json_schema_to_regex`, is a floor up.)"""

# (importing gbnf registers the GBNF format, and gives Grammar.from_gbnf/to_gbnf their code)
from toolkit.grammar.gbnf import GbnfText
from toolkit.grammar.inputs import (
    InputFormat,
    engine_input,
    format_of,
    formats,
    get_format,
    read,
    register_format,
    untold_text,
)
from toolkit.grammar.ir import Grammar, RegexText, Terminal

# (importing it registers xgrammar's structural tags as an input format)
from toolkit.grammar.structural_tag import StructuralTagText

__all__ = ["GbnfText", "Grammar", "InputFormat", "RegexText", "StructuralTagText", "Terminal", "engine_input",
           "format_of", "formats", "get_format", "read", "register_format", "untold_text"]
