"""The CLI says what went wrong in one line and exits non-zero, never a traceback
(``--debug`` shows it); ``mask`` and ``accepts`` take ``--schema``."""

from __future__ import annotations

import json

import pytest

from toolkit import cli


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(("argv", "says"), [
    (["mask", "--engine", "outlinez", "--regex", "a"], "unknown engine 'outlinez'"),
    (["accepts", "--lark", "/no/such/file.lark", "x"], "No such file"),
    (["accepts", "--schema", "{bad", "1"], "not JSON"),
    (["accepts", "--schema", "/no/such/schema.json", "1"], "No such file"),
    (["mask", "--engine", "outlines", "--regex", "(a"], "RegexError"),
])
def test_an_error_is_one_line_and_a_non_zero_exit(capsys, argv, says) -> None:
    rc, _, err = _run(capsys, *argv)
    assert rc == 2 and says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_file_that_is_not_utf8_is_named(capsys, tmp_path) -> None:
    bad = tmp_path / "latin1.lark"
    bad.write_bytes('start: "caf\xe9"\n'.encode("latin-1"))
    rc, _, err = _run(capsys, "accepts", "--lark", str(bad), "x")
    assert rc == 2 and "not UTF-8" in err and "latin1.lark" in err


def test_an_argument_that_is_not_utf8_is_read_as_bytes(capsys) -> None:
    rc, out, _ = _run(capsys, "accepts", "--regex", "a.b", "a\udcffb")  # what Python makes of a \xff byte
    assert rc == 1 and out.strip() == "rejected"
    rc, out, _ = _run(capsys, "accepts", "--regex", "a.b", "aéb")
    assert rc == 0 and out.strip() == "accepted"


def test_schema_is_a_file_or_its_json(capsys, tmp_path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    for spec in (str(path), json.dumps(schema)):
        assert _run(capsys, "accepts", "--schema", spec, '{"n": 3}')[0] == 0
        assert _run(capsys, "accepts", "--schema", spec, '{"n": "3"}')[0] == 1
    rc, out, _ = _run(capsys, "mask", "--engine", "llguidance", "--schema", json.dumps(schema), "--prefix", '{"n": 1')
    assert rc == 0 and "accepting: False" in out


def test_ctrl_c_is_a_line_and_exit_130_and_debug_shows_the_traceback(capsys, monkeypatch) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("toolkit.cli.engines._engines", interrupted)
    rc, _, err = _run(capsys, "engines")
    assert rc == 130 and "interrupted" in err and "Traceback" not in err
    with pytest.raises(KeyboardInterrupt):
        cli.main(["--debug", "engines"])
    with pytest.raises(ValueError, match="unknown engine"):
        cli.main(["--debug", "mask", "--engine", "outlinez", "--regex", "a"])


@pytest.mark.parametrize("error", [TypeError("bug"), KeyError("bug"), AttributeError("bug")])
def test_a_programming_error_is_not_a_user_error(capsys, monkeypatch, error) -> None:
    """A bug propagates with its traceback: only masklab's errors, OSError and ValueError
    (bad input) are one line and exit 2."""
    def broken(args):
        raise error

    monkeypatch.setattr("toolkit.cli.engines._engines", broken)
    with pytest.raises(type(error)):
        cli.main(["engines"])


def test_version_and_help_list_every_command(capsys) -> None:
    from toolkit.core.version import masklab_version

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"masklab {masklab_version()}"
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)
    parser = cli.build_parser()  # every command's arguments: each module loads and configures
    for name in cli.COMMANDS:
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"])
        assert "usage: masklab " + name in capsys.readouterr().out


def test_mask_takes_engine_options(capsys, tmp_path) -> None:
    """``-o`` reaches the engine ``mask`` builds: outlines refuses a recursive grammar,
    naming the option that unrolls it, and computes the mask with it; an option for
    another engine is refused."""
    lark = tmp_path / "nested.lark"
    lark.write_text('start: x\nx: "(" x ")" | "a"\n')
    rc, _, err = _run(capsys, "mask", "--engine", "outlines", "--lark", str(lark))
    assert rc == 2 and "-o outlines.grammar_max_depth=3" in err
    rc, out, _ = _run(capsys, "mask", "--engine", "outlines", "--lark", str(lark), "-o", "outlines.grammar_max_depth=3")
    assert rc == 0 and "b'('" in out and "b'a'" in out
    rc, _, err = _run(capsys, "mask", "--engine", "outlines", "--lark", str(lark), "-o", "llguidance.spelling=json")
    assert rc == 2 and "not among the engines" in err


def test_engine_options_are_checked_before_anything_runs(capsys, tmp_path) -> None:
    """``strict_mode=False`` is False (it ran with strict mode on); a value of the wrong
    type or an unknown key is refused before a record is written, naming the valid keys."""
    pytest.importorskip("xgrammar", reason="peer:xgrammar needs xgrammar (the [peers] extra)")
    out = tmp_path / "run"
    rc, _, _ = _run(capsys, "bench", "--engines", "peer:xgrammar", "--limit", "1", "--quick", "--quiet",
                    "--out", str(out), "-o", "peer:xgrammar.strict_mode=False")
    assert rc == 0
    run = json.loads((out / "run.json").read_text())
    assert run["engines"]["peer:xgrammar"]["options"]["strict_mode"] is False
    for bad, says in (("peer:xgrammar.strict_mode=maybe", "takes bool, got 'maybe'"),
                      ("peer:xgrammar.nonsense=1", "its options: any_whitespace, cache, max_threads, strict_mode"),
                      ("llguidance.max_row_items=12", "not among the engines")):
        fresh = tmp_path / bad.replace(":", "_")
        rc, _, err = _run(capsys, "bench", "--engines", "peer:xgrammar", "--limit", "1", "--quick", "--quiet",
                          "--out", str(fresh), "-o", bad)
        assert rc == 2 and says in err and not fresh.exists()


@pytest.mark.parametrize(("engine", "option", "says"), [
    ("llguidance", "whitespace=compat", "takes one of 'flexible', 'compact', got 'compat'"),
    ("xgrammar", "spelling=JSON", "takes one of 'json', 'llguidance', got 'JSON'"),
    ("outlines", "schema_regex=outlines", "takes one of 'masklab', 'outlines-core', got 'outlines'"),
    ("llguidance", "slices=[\"[0-9]+\", 3]", "takes one of 'default', 'none' or a list of str, got ['[0-9]+', 3]"),
    ("llguidance", "slices=nope", "got 'nope'"),
    ("naive", "max_items=1.5", "takes int, got 1.5"),
])
def test_enum_list_and_number_options_are_checked_by_their_declared_type(capsys, tmp_path, engine, option,
                                                                          says) -> None:
    """Enums (``Literal``), lists of a type and numbers are checked against the engine's
    declared parameters before anything runs, the valid values named."""
    out = tmp_path / "run"
    rc, _, err = _run(capsys, "bench", "--engines", engine, "--limit", "1", "--quick", "--quiet", "--out", str(out),
                      "-o", f"{engine}.{option}")
    assert rc == 2 and says in err and "Traceback" not in err and not out.exists()


def test_declared_option_types_accept_what_they_declare() -> None:
    from strategies import check_options

    check_options("llguidance", {"slices": ["[0-9]+", "[a-z]+"], "whitespace": "compact", "spelling": "llguidance"})
    check_options("llguidance", {"slices": "none"})
    check_options("outlines", {"schema_regex": "outlines-core", "grammar_max_depth": None, "max_depth": 2})
    check_options("peer:llguidance", {"limits": {"max_items_in_row": 12}})
    with pytest.raises(ValueError, match="a mapping of str to int or None, got"):
        check_options("peer:llguidance", {"limits": {"max_items_in_row": "12"}})
    with pytest.raises(ValueError, match="takes bool"):
        check_options("llguidance", {"memo": 1})


def test_a_draft_longer_than_the_rollback_the_peers_keep_is_refused(capsys, tmp_path) -> None:
    """``--draft`` lengths are bounded by MAX_DRAFT, what a wrapped engine's rollback
    buffer is sized for (a limit is an error, not an allocation)."""
    from toolkit.core.protocol import MAX_DRAFT

    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--engines", "naive", "--draft", f"4,{MAX_DRAFT + 1}", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and f"between 1 and {MAX_DRAFT}" in capsys.readouterr().err


def test_walks_below_one_are_refused(capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--engines", "naive", "--walks", "0", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "--walks: must be >= 1" in capsys.readouterr().err


def test_a_fresh_process_takes_every_input_flag() -> None:
    """In a new interpreter (the masklab command, nothing imported before it) mask and
    accepts offer every registered format's flag, --schema included."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "toolkit", "accepts", "--schema", '{"type": "integer"}', "12"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "accepted", out.stderr
    helps = subprocess.run([sys.executable, "-m", "toolkit", "mask", "--help"], capture_output=True, text=True,
                           timeout=120).stdout
    assert all(flag in helps for flag in ("--schema", "--lark", "--gbnf", "--regex", "--grammar"))
