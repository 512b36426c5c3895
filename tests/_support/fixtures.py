"""Hand-drawn vocabularies and grammars shared by the tests."""

from __future__ import annotations

from toolkit.core.vocab import Vocabulary

# A 28-id vocabulary for JSON-ish and digit grammars.  Id 0 is a special token,
# id 1 is EOS (special), the last two ids are padding (size 30).
#
#   id  bytes        id  bytes        id  bytes
#    2  "{"          11 "1"           20  " "
#    3  "}"          12 "12"          21  "  "
#    4  "["          13 "123"         22  '{"'
#    5  "]"          14 "a"           23  '":'
#    6  '"'          15 "ab"          24  "true"
#    7  ","          16 "abc"         25  "tr"
#    8  ":"          17 "b"           26  "null"
#    9  "0"          18 "é"           27  "\n"
#   10  "00"         19 "\xc3" (first byte of é)
SMALL_TOKENS: list[bytes] = [
    b"",
    b"",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b",",
    b":",
    b"0",
    b"00",
    b"1",
    b"12",
    b"123",
    b"a",
    b"ab",
    b"abc",
    b"b",
    "é".encode(),
    b"\xc3",
    b" ",
    b"  ",
    b'{"',
    b'":',
    b"true",
    b"tr",
    b"null",
    b"\n",
]


def small_vocab() -> Vocabulary:
    return Vocabulary.from_tokens(
        SMALL_TOKENS,
        eos_ids=(1,),
        special_tokens={0: "<unk>", 1: "</s>"},
        size=30,
        name="small",
    )


JSON_LARK = r"""
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
%import common.WS
%ignore WS
"""

# JSON nested at most twice (an object or array of scalars, inside an object or array at
# the top): a regular language, for the engines that compile regular grammars only.  Its
# sentences over ``small_vocab()`` walk like JSON_LARK's in the contract's checks.
JSON_FLAT_LARK = r"""
start: value
?value: object | array | scalar
?scalar: STRING | NUMBER | "true" | "false" | "null"
?inner: object1 | array1 | scalar
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" inner
object1: "{" [pair1 ("," pair1)*] "}"
pair1: STRING ":" scalar
array: "[" [inner ("," inner)*] "]"
array1: "[" [scalar ("," scalar)*] "]"
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
%import common.WS
%ignore WS
"""

ARITH_LARK = r"""
start: expr
expr: expr "+" term | expr "-" term | term
term: term "*" factor | term "/" factor | factor
factor: NUMBER | "(" expr ")" | "-" factor
NUMBER: /[0-9]+/
%ignore " "
"""


def llguidance_byte_tokenizer():
    """``(llguidance, tokenizer)`` with one token per byte plus EOS (id 256), so that a
    string is fed to llguidance byte by byte; skips the test without llguidance."""
    import pytest

    llguidance = pytest.importorskip("llguidance", reason="llguidance ([peers] extra) not installed")

    class ByteTok:
        tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        eos_token_id = 256
        bos_token_id = None
        is_tokenizer_wrapper = True

        def __call__(self, s):
            return list(s.encode() if isinstance(s, str) else s)

    return llguidance, llguidance.LLTokenizer(llguidance.TokenizerWrapper(ByteTok()))


# Regular languages over the small vocabularies' bytes (JSON-ish: braces, quotes,
# letters of true/null, digits, spaces), some with accepting states that text can
# leave (the case outlines-core gets wrong), one with a multi-byte character, and the
# language of the empty string.
REGULAR_REGEXES: list[str] = [
    r"(true|null)( (true|null))*",
    r'\{("[a-z]*": ?[0-9]+(, ?"[a-z]*": ?[0-9]+)*)?\}',
    r"[0-9]+(\.[0-9]+)?",
    r"(ab|a|b)*c?",
    r"\[( ?(true|[0-9]{1,3}),?)*\]",
    r'"[^"\\]{0,4}"',
    r"(é|a)+",
    r"a{3}|b",
    r"",
]
