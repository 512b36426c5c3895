"""Regexes for the JSON text of strings with a ``format`` (dates, times, e-mail
addresses, URIs, ...), exact or tighter."""

from __future__ import annotations

# ------------------------------------------------------------------- formats --

_SL = "\\x2F"  # "/", never written raw: it delimits regexes in Lark grammars
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001..9999
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DAY31 = "(?:0[1-9]|[12][0-9]|3[01])"
_DAY30 = "(?:0[1-9]|[12][0-9]|30)"
_DAY28 = "(?:0[1-9]|1[0-9]|2[0-8])"
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-{_DAY31}|(?:0[469]|11)-{_DAY30}|02-{_DAY28})"
    f"|{_LEAP_YEAR}-02-29)"
)
_HOUR = "(?:[01][0-9]|2[0-3])"
_MINUTE = "[0-5][0-9]"
_OFFSET = f"(?:[zZ]|[+\\-]{_HOUR}:{_MINUTE})"
_TIME = f"{_HOUR}:{_MINUTE}:{_MINUTE}(?:\\.[0-9]+)?{_OFFSET}"

_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_DEC_OCTET}(?:\\.{_DEC_OCTET}){{3}}"
_H16 = "[0-9a-fA-F]{1,4}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    """RFC 4291 section 2.2 text forms, as the IPv6address rule of RFC 3986."""
    g = f"{_H16}:"
    alts = [
        f"(?:{g}){{6}}{_LS32}",
        f"::(?:{g}){{5}}{_LS32}",
        f"(?:{_H16})?::(?:{g}){{4}}{_LS32}",
    ]
    for k, tail in ((1, f"(?:{g}){{3}}{_LS32}"), (2, f"(?:{g}){{2}}{_LS32}"), (3, f"{g}{_LS32}"),
                    (4, _LS32), (5, _H16), (6, "")):
        alts.append(f"(?:(?:{g}){{0,{k}}}{_H16})?::{tail}")
    return "(?:" + "|".join(alts) + ")"


_IPV6 = _ipv6()

_ALNUM = "[A-Za-z0-9]"
_LDH = "[A-Za-z0-9\\-]"


def _label(first: str, max_len: int) -> str:
    """A hostname label: 1..max_len letters, digits, hyphens; alphanumeric at both ends;
    no ``--`` in positions 3 and 4 (reserved for IDNA A-labels, which must be valid
    Punycode -- not checkable here)."""
    short = f"{_LDH}{{0,2}}{_ALNUM}"  # total length 2..4
    long_ = f"{_LDH}(?:{_ALNUM}{_LDH}|\\-{_ALNUM}){_LDH}{{0,{max_len - 5}}}{_ALNUM}"  # 5..max_len
    return f"{first}(?:{short}|{long_})?"


def _hostname() -> str:
    """Labels with a total length of at most 253, as a union of shapes (see FORMATS doc)."""
    shapes = []
    # (labels, max label length, max length of the last label): each total <= 253.
    for n_labels, max_len, last_len in ((4, 63, 61), (8, 30, 30), (16, 14, 14)):
        label, last = _label(_ALNUM, max_len), _label("[A-Za-z]", last_len)
        shapes.append(f"(?:{label}\\.){{0,{n_labels - 1}}}{last}")
    return "(?:" + "|".join(shapes) + ")"


_UNRESERVED = "A-Za-z0-9\\-._~"
_SUB_DELIMS = "!$&'()*+,;="
_PCT = "%[0-9a-fA-F]{2}"
_PCHAR = f"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = f"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
_QUERY = f"(?:{_PCHAR}|[{_SL}?])*"
_USERINFO = f"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_REG_NAME = f"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"
_IP_LITERAL = f"\\[(?:{_IPV6}|v[0-9a-fA-F]+\\.[{_UNRESERVED}{_SUB_DELIMS}:]+)\\]"
_AUTHORITY = f"(?:{_USERINFO}@)?(?:{_IP_LITERAL}|{_REG_NAME})(?::[0-9]*)?"
_PATH_ABEMPTY = f"(?:{_SL}{_SEGMENT})*"
_PATH_ABSOLUTE = f"{_SL}(?:{_SEGMENT_NZ}(?:{_SL}{_SEGMENT})*)?"
_SCHEME = "[A-Za-z][A-Za-z0-9+\\-.]*"
_TAIL = f"(?:\\?{_QUERY})?(?:#{_QUERY})?"
_URI = (
    f"{_SCHEME}:(?:{_SL}{_SL}{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
    f"|{_SEGMENT_NZ}(?:{_SL}{_SEGMENT})*|){_TAIL}"
)
_RELATIVE_REF = (
    f"(?:{_SL}{_SL}{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
    f"|{_SEGMENT_NZ_NC}(?:{_SL}{_SEGMENT})*|){_TAIL}"
)

_ATEXT = f"[A-Za-z0-9!#$%&'*+\\-{_SL}=?^_`{{|}}~]"
_EMAIL = (
    f"{_ATEXT}+(?:\\.{_ATEXT}+)*@(?:{_ALNUM}(?:{_LDH}{{0,61}}{_ALNUM})?"
    f"(?:\\.{_ALNUM}(?:{_LDH}{{0,61}}{_ALNUM})?)*|\\[{_IPV4}\\])"
)

# RFC 3339 appendix A: P then a date part (with an optional time part), a time part, or weeks
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = f"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"
# a regex as JSON text: literal characters, escaped metacharacters and \d \w \s (a
# backslash is \\ in JSON), ".", classes of literal characters, each at most once
# quantified, branches joined by "|", optional "^" and "$" at the ends
_RX_ATOM = r"(?:[ !#%&',\-/0-9:;<=>@A-Z_`a-z~]|\\\\[\^$.|?*+()\[\]{}/dDwWsS]|\.|\[[ !#-,./-Z_-~]+\])"
_RX_BRANCH = f"(?:{_RX_ATOM}[*+?]?)*"
_REGEX = f"\\^?{_RX_BRANCH}(?:\\|{_RX_BRANCH})*\\$?"

FORMATS: dict[str, str] = {
    "date-time": f'"{_DATE}[tT]{_TIME}"',
    "date": f'"{_DATE}"',
    "time": f'"{_TIME}"',
    "email": f'"{_EMAIL}"',
    "uuid": '"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"',
    "uri": f'"{_URI}"',
    "uri-reference": f'"(?:{_URI}|{_RELATIVE_REF})"',
    "ipv4": f'"{_IPV4}"',
    "ipv6": f'"{_IPV6}"',
    "hostname": f'"{_hostname()}"',
    "duration": f'"{_DURATION}"',
    "regex": f'"{_REGEX}"',
}
"""JSON string literal regexes (quotes included) of the supported ``format`` values.

Every value is written with raw ASCII characters only (no escapes): tighter than
JSON, which could spell ``"2020-01-01"`` with ``\\u0032``, but no producer does.
Per format, tighter than the RFC where noted:

* ``date``: RFC 3339 full-date, month lengths and leap years exact; years
  0001..9999 (year 0000 is RFC-valid but Python's ``date`` and so ``jsonschema``
  reject it).
* ``time`` / ``date-time``: RFC 3339 full-time / date-time with ``T``/``Z`` in
  either case, optional fraction, offset ``Z`` or ``+hh:mm``; the leap second
  ``:60`` is not accepted (it is valid only at 23:59 UTC, which depends on the offset).
* ``email``: RFC 5322 ``dot-atom "@" domain`` where the domain is dot-separated
  RFC 1123 labels or an RFC 5321 IPv4 address literal ``[192.168.1.1]`` (no quoted
  local parts, no IPv6 literals).
* ``uuid``: 8-4-4-4-12 hex digits, either case.
* ``uri`` / ``uri-reference``: the RFC 3986 grammar (``URI`` and ``URI-reference``)
  over ASCII, IP-literals included: exact.
* ``ipv4``: dotted quad, each 0..255 without leading zeros: exact (RFC 2673 form).
* ``ipv6``: the RFC 4291 text forms (RFC 3986 ``IPv6address``); no zone id.
* ``duration``: the RFC 3339 appendix A grammar (``P1Y2M``, ``PT5M``, ``P3W``): exact.
* ``regex``: a regular subset of the regexes valid in ECMA-262 and Python alike
  (nested groups are not regular): literal and escaped characters, ``\\d \\w \\s``,
  ``.``, classes of literal characters, one quantifier ``* + ?`` per atom, ``|``, and
  ``^``/``$`` at the ends.  No groups, ranges or counted repeats: tighter.
* ``hostname``: RFC 1123 labels (letters, digits, hyphens; alphanumeric at both
  ends; 1..63 characters).  Tighter: the last label starts with a letter (RFC 1123
  2.1: a top-level label is alphabetic, so no dotted-quad look-alikes); no label has
  ``--`` at positions 3-4 (IDNA A-labels need a Punycode check); and the 253
  character limit is enforced by shape: up to 4 labels of <= 63 (the last <= 61),
  or up to 8 labels of <= 30, or up to 16 labels of <= 14 characters.
"""


def json_format(name: str, *, pointer: str = "") -> str | None:
    """The JSON string literal regex of ``format: name``; ``None`` for an unknown format.

    An unknown format is an annotation in JSON Schema 2020-12, so the caller ignores
    it; ``pointer`` is accepted for symmetry with the other builders.
    """
    del pointer
    return FORMATS.get(name)
