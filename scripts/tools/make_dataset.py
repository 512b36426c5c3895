"""The tool-calling dataset (issue 48): ``datasets/tools/``, written by this script.

    python scripts/tools/make_dataset.py            # MASKLAB_SHARED: MaskBench; needs xgrammar

The tools are the function-calling schemas of MaskBench in ``$MASKLAB_SHARED``: each
BFCL item is one or more functions (an ``anyOf`` of ``{name: arguments}``), each Glaive
item one function's arguments (the name in the file name).  A tool with a valid test
instance of its own that its schema, closed as xgrammar closes it
(:func:`toolkit.grammar.structural_tag.strict_schema`), accepts can be called in a
transcript; the others are only on the list.  More tools than MaskBench has (218) are
its tools again under new names (``NAME_2``...).

Each item is a setup of 1, 8, 64 or 512 tools in one model's format: the structural tag
xgrammar's ``get_model_structural_tag(model, tools, reasoning=False)`` writes (xgrammar
0.2.8's built-ins: ``llama``, ``qwen_3``, ``deepseek_v3_1``, three ways to wrap a JSON
call).  Its tests are transcripts written here in that format: valid ones (text alone, a
call between texts, a call first, two calls) and invalid ones (a tool not on the list,
arguments missing a required key, a key the tool does not take, a call left open).
``tests/test_tool_dataset.py`` checks every verdict against masklab's reading of the
tag and against xgrammar's own.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

SIZES = (1, 8, 64, 512)
MODELS = ("llama", "qwen_3", "deepseek_v3_1")
TEXT, AFTER = "Let me check that.", " Done."


def _call(model: str, name: str, args: dict[str, Any]) -> str:
    """One call in ``model``'s format."""
    body = json.dumps(args, ensure_ascii=False)
    if model == "llama":
        return f'{{"name": {json.dumps(name)}, "parameters": {body}}}'
    if model == "qwen_3":
        return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {body}}}\n</tool_call>'
    return (f"<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>{name}"
            f"<\uff5ctool\u2581sep\uff5c>{body}<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>")


def tool_pool(maskbench: Path) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """``(name, arguments schema, an instance or None)`` of every MaskBench tool, by name."""
    import jsonschema

    from toolkit.data.datasets import iter_items
    from toolkit.grammar.structural_tag import strict_schema

    pool: dict[str, tuple[dict[str, Any], Any]] = {}
    for it in iter_items(maskbench):
        if not it.name.startswith(("BFCL", "Glaiveai2K")) or not isinstance(it.spec, dict):
            continue
        valid = [json.loads(c.text) for c in it.cases if c.valid]
        if it.name.startswith("Glaiveai2K"):
            name = re.sub(r"_[0-9a-f]{8}$", "", it.name.split("---", 1)[1])
            if it.spec.get("type") == "object":
                pool.setdefault(name, (it.spec, valid[0] if valid else None))
            continue
        for alt in it.spec.get("anyOf", [it.spec]):
            props = alt.get("properties", {}) if isinstance(alt, dict) else {}
            if len(props) == 1:
                ((name, params),) = props.items()
                found = [v[name] for v in valid if isinstance(v, dict) and name in v]
                pool.setdefault(name, (params, found[0] if found else None))
    out = []
    for name, (params, example) in sorted(pool.items()):
        if example is not None and not jsonschema.validators.validator_for(params)(strict_schema(params)).is_valid(
                example):
            example = None  # a key the closed schema refuses: not called
        out.append((name, params, example))
    return out


def setup(pool: list[tuple[str, dict[str, Any], Any]], n: int) -> list[tuple[str, dict[str, Any], Any]]:
    """``n`` tools, those with an instance first; past the pool, its tools renamed."""
    ordered = [t for t in pool if t[2] is not None] + [t for t in pool if t[2] is None]
    return [(name if i < len(ordered) else f"{name}_{i // len(ordered) + 1}", params, example)
            for i, (name, params, example) in ((i, ordered[i % len(ordered)]) for i in range(n))]


def item(model: str, tools: list[tuple[str, dict[str, Any], Any]]) -> dict[str, Any]:
    """The dataset item of ``tools`` in ``model``'s format."""
    from xgrammar.builtin_structural_tag import get_model_structural_tag

    spec = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p, _ in tools]
    tag = json.loads(get_model_structural_tag(model, tools=spec, reasoning=False).model_dump_json())
    callable_ = [(n, p, e) for n, p, e in tools if e is not None]
    (n1, p1, e1), (n2, _, e2) = callable_[0], callable_[min(1, len(callable_) - 1)]
    tests = [(TEXT, True, "text alone"),
             (TEXT + _call(model, n1, e1) + AFTER, True, f"a call of {n1} between texts"),
             (_call(model, n2, e2) + AFTER, True, f"a call of {n2} first"),
             (TEXT + _call(model, n1, e1) + _call(model, n2, e2), True, "two calls"),
             (TEXT + _call(model, "no_such_tool", e1), False, "a tool not on the list"),
             (TEXT + _call(model, n1, {**e1, "zz_unknown": 1}), False, "a key the tool does not take"),
             (TEXT + _call(model, n1, e1)[:-3], False, "a call left open")]
    required = [k for k in p1.get("required", []) if k in e1]
    if required:
        tests.append((TEXT + _call(model, n1, {k: v for k, v in e1.items() if k != required[0]}), False,
                      f"{n1} without its required {required[0]!r}"))
    return {"description": f"{len(tools)} tool(s) from MaskBench's BFCL and Glaive schemas in {model}'s tool-call "
                           "format (xgrammar's built-in structural tag, reasoning off); written by "
                           "scripts/tools/make_dataset.py",
            "structural_tag": tag,
            "tests": [{"text": t, "valid": v, "description": d} for t, v, d in tests]}


def main(argv: list[str]) -> int:
    from toolkit.data.datasets import embedded_dir, shared_dir

    maskbench = shared_dir() / "datasets" / "maskbench"
    if not maskbench.is_dir():
        print(f"make_dataset: no MaskBench data at {maskbench} (set MASKLAB_SHARED)", file=sys.stderr)
        return 2
    pool = tool_pool(maskbench)
    out = embedded_dir() / "tools"
    out.mkdir(exist_ok=True)
    for model in MODELS:
        for n in SIZES:
            path = out / f"tools-{model}-{n}.json"
            doc = item(model, setup(pool, n))  # (the big setups without indentation)
            path.write_text(json.dumps(doc, ensure_ascii=False, indent=1 if n <= 8 else None) + "\n", encoding="utf-8")
            print(f"wrote {path.relative_to(embedded_dir().parent)}")
    print(f"{len(pool)} tools, {sum(1 for t in pool if t[2] is not None)} with an instance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
