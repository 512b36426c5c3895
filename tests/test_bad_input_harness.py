"""Bad input to the harness (issue 44), one test per mistake: a second writer on a run
folder, each dataset mistake, an empty folder, a schema its meta-schema rejects; and
what a compile says it left unenforced (peer:xgrammar's warnings, the peers' documented
omissions, nothing for masklab's strategies)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from strategies import get_engine
from strategies._unenforced import from_messages
from tests._support.fixtures import small_vocab
from toolkit.bench.audit import schema_validator
from toolkit.bench.coverage import schema_coverage
from toolkit.bench.measure import measure_item
from toolkit.bench.records import summary_lines
from toolkit.bench.run import run_bench
from toolkit.bench.runlock import LOCK_NAME, lock_holder, run_folder_lock
from toolkit.cli import main
from toolkit.core.errors import HarnessError
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import DatasetError, item_problem, iter_items, load_item
from toolkit.grammar import GbnfText, Grammar
from toolkit.grammar.inputs import read
from toolkit.jsonschema.meta import KEYWORDS, keywords_named

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"schema": {"type": "integer"}, "tests": [{"data": 1, "valid": True}, {"data": "x", "valid": False}]}
BAD_SCHEMA = {"type": "object", "properties": {"n": {"type": 5}}}
HOLD = ("import sys\nfrom toolkit.bench.runlock import run_folder_lock\n"
        "with run_folder_lock(sys.argv[1]):\n    print('held', flush=True)\n    sys.stdin.read()\n")


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _folder(tmp_path: Path, **items: dict) -> Path:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for name, doc in items.items():
        (data / f"{name}.json").write_text(json.dumps(doc))
    return data


# ------------------------------------------------------------------ one writer --


@pytest.fixture
def held(tmp_path: Path):
    """A run folder whose lock another process holds (yields the folder and that process)."""
    folder = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "held"
        yield folder, proc
    finally:
        proc.kill()
        proc.wait()


def test_a_second_writer_is_refused_at_once_and_a_dead_ones_lock_is_not_stale(held, tmp_path, capsys) -> None:
    """Every command that writes a run folder refuses one another process is writing,
    in one line naming the folder and the other run's pid; once that process is killed
    (SIGKILL: no clean-up of its own) the folder is free."""
    folder, proc = held
    spec = tmp_path / "sweep.toml"
    spec.write_text('engines = ["llguidance"]\nlimit = 1\n[vocabs]\ntekken = "tekken"\n[data]\nembedded = "embedded"\n')
    for argv in (["bench", "--engines", "llguidance", "--limit", "1", "--quick", "--quiet"],
                 ["audit", "--engines", "llguidance", "--limit", "1", "--quiet"],
                 ["generate", "--engine", "llguidance", "--limit", "1"],
                 ["sweep", str(spec), "--quiet"]):
        rc, err = _run(capsys, *argv, "--out", str(folder))
        line = _one_line(err)
        assert rc == 2 and "HarnessError" in line and str(folder) in line and f"pid {proc.pid}" in line, argv
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]  # nothing written
    assert lock_holder(folder)["pid"] == proc.pid
    with pytest.raises(HarnessError, match="in use by another run"):
        run_bench(["llguidance"], out=folder, progress=False)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with run_folder_lock(folder):  # the kernel let go of the dead process's lock
        assert lock_holder(folder)["pid"] == os.getpid()
    assert lock_holder(folder) == {}


def test_the_lock_is_reentrant_in_its_process_and_leaves_no_empty_folder(tmp_path: Path) -> None:
    """A sweep holds its folder and each cell's run_bench takes it again; a run refused
    before it wrote anything leaves no folder behind."""
    fresh = tmp_path / "a" / "b"
    with run_folder_lock(fresh), run_folder_lock(fresh):
        assert (fresh / LOCK_NAME).is_file()
    assert not (tmp_path / "a").exists()
    with pytest.raises(HarnessError, match="timeout must be positive"):
        run_bench(["llguidance"], out=fresh, timeout=0, progress=False)
    assert not (tmp_path / "a").exists()


# ------------------------------------------------------------- dataset files --


@pytest.mark.parametrize(("doc", "pointer", "says"), [
    ({"schema": {"type": "integer"}}, "/tests", "found no 'tests'"),
    ({"schema": {"type": "integer"}, "tests": "nope"}, "/tests", 'expected a list of test instances, got "nope"'),
    ({"schema": {"type": "integer"}, "tests": [{"data": 1, "valid": True}, 5]}, "/tests/1",
     "expected a test instance"),
    ({"schema": {"type": "integer"}, "tests": [{"data": k, "valid": True} for k in range(3)]
      + [{"data": 3, "valid": "yes"}]}, "/tests/3/valid", 'expected true or false, got "yes"'),
    ({"schema": {"type": "integer"}, "tests": [{"data": 1, "valid": 1}]}, "/tests/0/valid", "got 1"),
    ({"schema": {"type": "integer"}, "tests": [{"data": 1}]}, "/tests/0/valid", "found no 'valid'"),
    ({"schema": {"type": "integer"}, "tests": [{"valid": True}]}, "/tests/0/data", "found no 'data'"),
    ({"regex": "a+", "tests": [{"valid": True}]}, "/tests/0", "'text'"),
    ({"regex": "a+", "tests": [], "vocab": 3}, "/vocab", "expected a vocabulary name"),
    ([GOOD], "/", "expected a JSON object"),
])
def test_each_dataset_mistake_names_the_file_the_pointer_and_what_was_expected(tmp_path, doc, pointer,
                                                                             says) -> None:
    path = _folder(tmp_path, item=doc) / "item.json"
    with pytest.raises(DatasetError) as e:
        load_item(path)
    assert f"{path} at {pointer}: " in str(e.value) and says in str(e.value)


def test_a_bare_schema_file_is_told_what_an_item_is(tmp_path) -> None:
    """A plain JSON schema given as --data: the error says it looks like one and shows
    the item format it needs, not just the keys it lacks."""
    path = _folder(tmp_path, person={"type": "object", "properties": {"name": {"type": "string"}}}) / "person.json"
    with pytest.raises(DatasetError) as e:
        load_item(path)
    says = str(e.value)
    assert "looks like a bare JSON schema" in says and '{"schema": {...}, "tests": [' in says
    assert "datasets/README.md" in says
    with pytest.raises(DatasetError) as e:  # neither: no guess, the format all the same
        load_item(_folder(tmp_path, thing={"name": "x"}) / "thing.json")
    assert "bare JSON schema" not in str(e.value) and '"tests": [' in str(e.value)


@pytest.mark.parametrize("command", ["bench", "audit", "schema-coverage"])
def test_a_bad_item_stops_each_command_in_one_line(tmp_path, capsys, command) -> None:
    data = _folder(tmp_path, good=GOOD, bad={"schema": {"type": "integer"}, "tests": [{"data": 1, "valid": "yes"}]})
    argv = {"bench": ["--engines", "llguidance", "--quick", "--quiet", "--out", str(tmp_path / "run")],
            "audit": ["--engines", "llguidance", "--quiet", "--out", str(tmp_path / "run")],
            "schema-coverage": ["--quiet"]}[command]
    rc, err = _run(capsys, command, "--data", str(data), *argv)
    line = _one_line(err)
    assert rc == 2 and f"{data / 'bad.json'} at /tests/0/valid: expected true or false" in line
    assert not (tmp_path / "run").exists()


def test_an_empty_folder_is_refused(tmp_path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="no dataset items in"):
        list(iter_items(empty))
    for argv in (["bench", "--engines", "llguidance", "--out", str(tmp_path / "run"), "--quiet"],
                 ["schema-coverage", "--quiet"]):
        rc, err = _run(capsys, *argv, "--data", str(empty))
        assert rc == 2 and "no dataset items in" in _one_line(err)


def test_an_item_without_tests_is_refused_where_items_are_judged_by_them(tmp_path, capsys) -> None:
    """``"tests": []`` is in the format (195 MaskBench items), but bench and
    schema-coverage would count it passing on nothing: refused, or left out with
    ``--skip-bad-items`` (a note names it); the audit, which walks the engine's own
    masks, takes it."""
    data = _folder(tmp_path, good=GOOD, untested={"schema": {"type": "string"}, "tests": []})
    item = load_item(data / "untested.json")
    assert item.cases == () and item_problem(item, schemas=True) is None
    assert "/tests: expected at least one test instance" in item_problem(item, tests=True)
    with pytest.raises(DatasetError, match=r"untested.json at /tests: .*--skip-bad-items"):
        schema_coverage(data)
    rc, err = _run(capsys, "bench", "--engines", "llguidance", "--data", str(data), "--out", str(tmp_path / "r"))
    assert rc == 2 and "untested.json at /tests" in _one_line(err)
    kept = schema_coverage(data, skip_bad_items=True)
    assert [r.name for r in kept] == ["good"] and "untested.json at /tests" in capsys.readouterr().err


def test_a_schema_its_meta_schema_rejects_is_refused_with_jsonschemas_message(tmp_path, capsys) -> None:
    """bench, audit and schema-coverage refuse it when they load it, with the pointer into
    the file and jsonschema's message; the audit's own validator says the same (one
    function, toolkit.jsonschema.meta)."""
    data = _folder(tmp_path, good=GOOD, bad={"schema": BAD_SCHEMA, "tests": [{"data": {"n": 1}, "valid": True}]})
    says = "5 is not valid under any of the given schemas"
    for argv in (["bench", "--engines", "llguidance", "--quick"], ["audit", "--engines", "llguidance"],
                 ["schema-coverage"]):
        rc, err = _run(capsys, *argv, "--data", str(data), "--quiet", *(["--out", str(tmp_path / "r")]
                                                                         if argv[0] != "schema-coverage" else []))
        line = _one_line(err)
        assert rc == 2 and f"{data / 'bad.json'} at /schema/properties/n/type: not a JSON schema" in line, argv
        assert says in line and "draft 2020-12" in line
    with pytest.raises(ValueError, match=re.escape(f"not a JSON schema at /properties/n/type (by the draft 2020-12 "
                                                   f"meta-schema): {says}")):
        schema_validator(BAD_SCHEMA)
    assert [r.name for r in schema_coverage(data, skip_bad_items=True)] == ["good"]
    assert "1 item(s) left out" in capsys.readouterr().err


def test_the_real_datasets_still_load(shared_dir: Path) -> None:
    """Every embedded item and every MaskBench file loads; MaskBench's 195 items without
    tests are the ones bench refuses, and its one schema its draft's meta-schema rejects
    (a draft-04 enum with repeated values) is the one the meta-schema check finds."""
    embedded = list(iter_items(ROOT / "datasets"))
    assert len(embedded) == 86 and not [i for i in embedded if item_problem(i, tests=True)]  # (12 tool setups)
    maskbench = list(iter_items(shared_dir / "datasets" / "maskbench"))
    assert len(maskbench) == 1500 and sum(not i.cases for i in maskbench) == 195
    bad = load_item(shared_dir / "datasets" / "maskbench" / "Github_medium---o82255.json")
    assert "/schema/properties/Room/items/items/properties/nationality/enum" in item_problem(bad, schemas=True)


# ---------------------------------------------------------------- enforcement --


@pytest.fixture(scope="module")
def xgr():
    pytest.importorskip("xgrammar", reason="peer:xgrammar needs xgrammar (the [peers] extra)")
    return get_engine("peer:xgrammar", small_vocab())


def test_xgrammars_compile_warnings_are_captured_per_compile(xgr, capfd) -> None:
    """xgrammar's C++ writes its warnings to file descriptor 2; the adapter takes them
    off it into ``compiled.unenforced``, one entry per keyword they name."""
    one_of = xgr.compile({"oneOf": [{"type": "integer"}, {"type": "number"}]}).unenforced
    assert [e["keyword"] for e in one_of] == ["oneOf"] and "anyOf" in one_of[0]["message"]
    beside = xgr.compile({"type": "string", "pattern": "^a+$", "maxLength": 3}).unenforced
    assert [e["keyword"] for e in beside] == ["maxLength"] and "ignoring minLength/maxLength" in beside[0]["message"]
    assert xgr.compile({"type": "integer"}).unenforced == []
    assert "Warning" not in capfd.readouterr().err  # taken off fd 2, nothing else lost
    # an identity escape keeps its meaning (xgrammar's warning says so): nothing left out
    assert xgr.compile(Grammar.from_lark('start: /[^",]+/\n')).unenforced == []  # written [^\"\,]
    assert from_messages(["Regex parsing warning at position 5: Escape sequence '\\,' is not recognized. "
                          "The character itself will be matched"]) == []


def test_llguidances_warnings_come_from_its_matcher() -> None:
    """As shipped, llguidance refuses what it cannot enforce (nothing to report); its
    ``lenient`` and ``coerce_one_of`` JSON options let it through with a warning, which
    the adapter keeps."""
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    schema = {"type": "integer", "not": {"const": 1}}
    with pytest.raises(Exception, match="Unimplemented keys"):
        get_engine("peer:llguidance", small_vocab()).compile(schema)
    lenient = get_engine("peer:llguidance", small_vocab(), json_options={"lenient": True, "coerce_one_of": True})
    assert lenient.compile(schema).unenforced == [{"keyword": "not", "message": 'Unimplemented keys: ["not"]'}]
    assert [e["keyword"] for e in lenient.compile({"oneOf": [{"type": "integer"}, {"type": "number"}]}).unenforced] \
        == ["oneOf"]


def test_documented_omissions_come_with_their_pointer(xgr) -> None:
    schema = {"type": "object", "properties": {"not": {"type": "integer", "not": {"const": 1}},
                                               "b": {"if": {"type": "integer"}, "then": {"minimum": 3}}}}
    got = {e["keyword"]: e for e in xgr.compile(schema).unenforced}
    assert got["not"]["pointer"] == "/properties/not" and got["not"]["count"] == 1
    assert got["if"]["pointer"] == got["then"]["pointer"] == "/properties/b" and "else" not in got


@pytest.mark.parametrize(("message", "keywords"), [  # the peers' own words (xgrammar 0.2.8, llguidance 1.9.1)
    ("oneOf with overlapping or non-provably-disjoint branches cannot be represented exactly; falling back to "
     "anyOf semantics", ["oneOf"]),
    ("pattern combined with minLength/maxLength is not supported; ignoring minLength/maxLength",
     ["minLength", "maxLength"]),
    ("multipleOf is not supported for type:number; ignoring multipleOf", ["multipleOf"]),
    ("Support for allOf with multiple options is still ongoing", ["allOf"]),
    ("Anchor '$' in the middle of regex is ignored: ^$|(^(?:\\S+\\s+){0,99}\\S+$)", ["pattern"]),
    ('Unimplemented keys: ["if", "then"]', ["if", "then"]),
    ("Unknown format: foo", ["format"]),
    ('min/maxProperties only supported when all keys listed in "properties" are required',
     ["minProperties", "maxProperties"]),
    ("oneOf not fully supported, falling back to anyOf. This may cause validation errors in some cases.", ["oneOf"]),
])
def test_a_warning_names_the_keywords_it_leaves_out(message, keywords) -> None:
    assert keywords_named(message) == keywords


# keyword -> (a schema where it matters, an instance it forbids that the engine takes)
XGRAMMAR_IGNORES = {
    "not": ({"type": "integer", "not": {"const": 1}}, "1"),
    "if": ({"if": {"type": "integer"}, "then": {"minimum": 3}}, "1"),
    "then": ({"if": {"type": "integer"}, "then": {"minimum": 3}}, "1"),
    "else": ({"if": {"type": "integer"}, "else": {"type": "string"}}, "true"),
}
OUTLINES_CORE_IGNORES = {
    "minimum": ({"type": "integer", "minimum": 3}, "1"),
    "maximum": ({"type": "number", "maximum": 3}, "5"),
    "exclusiveMinimum": ({"type": "integer", "exclusiveMinimum": 3}, "3"),
    "exclusiveMaximum": ({"type": "integer", "exclusiveMaximum": 3}, "5"),
    "multipleOf": ({"type": "integer", "multipleOf": 3}, "4"),
    "uniqueItems": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1,1]"),
    "contains": ({"type": "array", "contains": {"type": "integer"}}, '["a"]'),
    "minContains": ({"type": "array", "contains": {"const": 1}, "minContains": 2}, "[1]"),
    "propertyNames": ({"type": "object", "propertyNames": {"pattern": "^a"}}, '{"b":1}'),
    "dependentRequired": ({"type": "object", "properties": {"a": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}}, '{"a":1}'),
    "dependentSchemas": ({"type": "object", "dependentSchemas": {"a": {"required": ["b"]}}}, '{"a":1}'),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1"),
}


def test_the_documented_lists_hold(xgr) -> None:
    """Each keyword a peer class lists as unenforced really is: the engine takes an
    instance the keyword forbids (xgrammar through the adapter, outlines-core through
    its own schema-to-regex, as its index follows that regex)."""
    from strategies.peers import OutlinesCoreEngine, XGrammarEngine

    assert set(XGrammarEngine.unenforced_keywords) == set(XGRAMMAR_IGNORES)
    vocab = xgr.vocab
    for keyword, (schema, text) in XGRAMMAR_IGNORES.items():
        m = xgr.matcher(xgr.compile(schema))
        ids = [*vocab.encode(text), vocab.eos_ids[0]]
        assert m.accept_tokens(ids) == len(ids), keyword
        assert not schema_validator(schema).is_valid(json.loads(text)), keyword
    assert set(OutlinesCoreEngine.unenforced_keywords) == set(OUTLINES_CORE_IGNORES) <= KEYWORDS
    pytest.importorskip("outlines_core", reason="peer:outlines-core needs outlines-core (the [peers] extra)")
    from outlines_core.json_schema import build_regex_from_schema

    for keyword, (schema, text) in OUTLINES_CORE_IGNORES.items():
        assert re.fullmatch(build_regex_from_schema(json.dumps(schema), None), text), keyword
        assert not schema_validator(schema).is_valid(json.loads(text)), keyword


LLAMACPP_IGNORES = {
    **{k: v for k, v in OUTLINES_CORE_IGNORES.items() if k not in ("dependentSchemas",)},
    "maxContains": ({"type": "array", "contains": {"const": 1}, "maxContains": 1}, "[1,1]"),
    "dependentSchemas": ({"type": "object", "properties": {"a": {"type": "integer"}},
                          "dependentSchemas": {"a": {"required": ["b"]}}}, '{"a":1}'),
    "dependencies": ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",  # (no keyword in 2020-12)
                      "properties": {"a": {"type": "integer"}}, "dependencies": {"a": ["b"]}}, '{"a":1}'),
    "not": ({"type": "integer", "not": {"const": 1}}, "1"),  # (if/then/else need a type: without, it refuses)
    "if": ({"type": "integer", "if": {"minimum": 0}, "then": {"minimum": 3}}, "1"),
    "then": ({"type": "integer", "if": {"minimum": 0}, "then": {"minimum": 3}}, "1"),
    "else": ({"type": "integer", "if": {"minimum": 5}, "else": {"maximum": 0}}, "1"),
    "patternProperties": ({"type": "object", "patternProperties": {"^a": {"type": "integer"}}}, '{"a":"x"}'),
    "minProperties": ({"type": "object", "minProperties": 1}, "{}"),
    "maxProperties": ({"type": "object", "maxProperties": 0}, '{"a":1}'),
    "additionalItems": ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
                         "items": [{"type": "integer"}], "additionalItems": {"type": "string"}}, "[1]"),  # (closed after the tuple: tighter, not looser; listed as not read)
    "allOf": ({"type": "integer", "allOf": [{"minimum": 3}]}, "1"),
}


def test_llamacpps_documented_list_holds() -> None:
    """Each keyword peer:llama.cpp lists is read past by llama-cpp-python's converter:
    its GBNF (read by masklab's GBNF front end) takes an instance the keyword forbids
    (``additionalItems`` aside: there the tuple is closed, a narrower language, so the
    instance is one the schema allows)."""
    pytest.importorskip("llama_cpp", reason="peer:llama.cpp needs llama-cpp-python (the [peers] extra)")
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from strategies.peer_llamacpp import LlamaCppEngine

    assert set(LlamaCppEngine.unenforced_keywords) == set(LLAMACPP_IGNORES) <= KEYWORDS
    for keyword, (schema, text) in LLAMACPP_IGNORES.items():
        grammar = read(GbnfText(json_schema_to_gbnf(json.dumps(schema))))
        assert grammar.accepts(text), keyword
        assert schema_validator(schema).is_valid(json.loads(text)) is (keyword == "additionalItems"), keyword


def test_records_say_what_was_unenforced_and_ours_leave_nothing_out(tmp_path, xgr) -> None:
    """``rec["unenforced"]`` per item: peer:xgrammar's oneOf warning; empty for every
    one of masklab's strategies on the same item (they compile it exactly); the bench's
    summary counts the items."""
    tekken = load_vocab("tekken")
    item = load_item(_folder(tmp_path, overlap={"schema": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                                                "tests": [{"data": 1.5, "valid": True}, {"data": 1, "valid": False}]})
                     / "overlap.json")
    peer = measure_item(get_engine("peer:xgrammar", tekken), tekken, item)
    assert [e["keyword"] for e in peer["unenforced"]] == ["oneOf"] and peer["status"] == "invalidation_error"
    for name in ("llguidance", "xgrammar", "outlines"):
        rec = measure_item(get_engine(name, tekken), tekken, item)
        assert rec["unenforced"] == [] and rec["status"] == "passing", (name, rec["detail"])
    lines = summary_lines([peer, rec])
    assert "  1 item(s) compiled with keywords left unenforced: oneOf 1 (rec['unenforced'])" in lines
