"""scripts/dialect/llguidance_corpus.py: the reader of llguidance's Rust test calls and the verdicts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dialect" / "llguidance_corpus.py"

RUST = r'''
#[test]
fn test_some() {
    lark_str_test_many(
        r#"start: "a" /[0-9]+/"#,
        &["a1", "a\u{e9}"], // a comment
        &["FINAL_REJECT:a", "b1"],
    );
    lark_ok(" start: \"x\" \
             \"y\" ");
    lark_err_test(r#"start: FOO"#, "unknown name");
    let grm = format!("start: {}", "x");
    lark_str_test_many(&grm, &["x"], &[]);
    let matching = &["ab"];
    lark_str_test_many(r##"start: "a" "b""##, matching, &["a"]);
    json_test_many(
        &json!({"type": "array", "items": {"type": "integer"},}),
        &[json!([1, 2]), json!([])],
        &[json!(["x"]),],
    );
}

pub fn lark_ok(lark: &str) {}
'''


@pytest.fixture(scope="module")
def corpus():
    spec = importlib.util.spec_from_file_location("llguidance_corpus", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks itself up there
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules[spec.name]


def test_the_literal_calls_are_read_and_the_built_ones_counted(corpus) -> None:
    cases, skipped = corpus.read_cases(RUST)
    assert [c.call for c in cases] == ["lark_str_test_many", "lark_ok", "lark_err_test", "lark_str_test_many",
                                       "json_test_many"]
    assert skipped == [RUST[: RUST.index("&grm")].count("\n") + 1]
    first, ok, _, named, js = cases
    assert first.grammar == 'start: "a" /[0-9]+/' and first.accepted == ["a1", "a\u00e9"]
    assert first.rejected == ["FINAL_REJECT:a", "b1"]
    assert ok.grammar == ' start: "x" "y" '  # the line continuation and its indentation vanish
    assert named.accepted == ["ab"] and named.rejected == ["a"]  # a variable: its `let`
    assert js.grammar.startswith("start: %json ") and js.accepted == ["[1,2]", "[]"] and js.rejected == ['["x"]']


def test_a_verdict_that_differs_is_reported(corpus) -> None:
    case = corpus.Case(1, "lark_str_test_many", 'start: "a"+', accepted=["aa", "b"], rejected=["FINAL_REJECT:a"])
    status, why, wrong = corpus.masklab_verdicts(case)
    assert status == "compiled" and why == ""
    assert wrong == ["refused accepted 'b'", "accepted rejected 'FINAL_REJECT:a'"]
    assert corpus.masklab_verdicts(corpus.Case(1, "lark_ok", "start: x[stop=\"y\"]: /a/"))[0] in ("refused", "error")
