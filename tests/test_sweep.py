"""``masklab sweep``: a grid as one resumable run folder, its axes in every record, and
the report's figure against the vocabulary size."""

from __future__ import annotations

import json

import pytest

from toolkit.bench.records import read_records
from toolkit.bench.sweep import SweepError, load_sweep, sweep_from_dict
from toolkit.cli import main
from toolkit.core.vocab import load_vocab

SPEC = """
engines = ["llguidance", "outlines"]
limit = 3
seed = 5
quick = true
timeout = 60
jobs = 2

[vocabs]
tekken = "tekken"
small = "hf:{hf}"

[data]
embedded = "embedded"

[options.default]
[options.no-slices]
llguidance = {{ slices = "none" }}
"""


@pytest.fixture
def hf_vocab(tmp_path):
    """A small byte-level vocabulary (a hf tokenizer.json) for a second grid point."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(['{"name": "Ada", "age": 36}', "2024-01-31", "SELECT a FROM t WHERE b = 1"] * 50,
                            trainer)
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path


def test_a_sweep_runs_its_grid_into_one_folder_and_resumes(tmp_path, hf_vocab, capsys) -> None:
    spec = tmp_path / "grid.toml"
    spec.write_text(SPEC.format(hf=hf_vocab))
    sweep = load_sweep(spec)
    assert len(sweep.cells()) == 4 and sweep.cells()[0] == {"vocab": "tekken", "options": "default", "data": "embedded"}
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet", "--report"]) == 0
    recs = read_records(out / "records.jsonl")
    assert len(recs) == 4 * 2 * 3  # cells x engines x items
    cells = {json.dumps(r["axes"], sort_keys=True) for r in recs}
    assert len(cells) == 4 and all(set(r["axes"]) == {"vocab", "options", "data"} for r in recs)
    # the option set reached its engine: the slices differ between the two llguidance cells
    metas = {p.name: json.loads(p.read_text()) for p in (out / "cells").glob("*.json")}
    sliced = {n: m["engines"]["llguidance"]["options"]["slices"] for n, m in metas.items()}
    assert sorted(map(str, sliced.values())).count("none") == 2
    # resume: nothing redone, nothing added
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 0
    assert len(read_records(out / "records.jsonl")) == len(recs)
    # the report: one row per engine and cell, TBM and TTFM against the vocabulary size
    table = (out / "sweep.csv").read_text().splitlines()
    assert len(table) == 1 + 8 and "vocab_size" in table[0]
    sizes = {load_vocab("tekken").size, load_vocab(f"hf:{hf_vocab}").size}
    assert {int(line.split(",")[4]) for line in table[1:]} == sizes
    assert (out / "sweep_vocab_default_embedded.png").is_file()
    assert main(["report", str(out), "--axis", "options"]) == 0
    assert (out / "sweep_options_tekken_embedded.png").is_file()
    # another spec in the same folder is refused
    spec.write_text(SPEC.format(hf=hf_vocab).replace("limit = 3", "limit = 4"))
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 2
    assert "another spec" in capsys.readouterr().err


@pytest.mark.parametrize(("doc", "says"), [
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}}, "[data]"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "jobz": 2}, "unknown key"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"},
      "options": {"o": {"xgrammar": {"memo": False}}}}, "not among the engines"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"},
      "options": {"o": {"llguidance": {"whitespace": "wide"}}}}, "one of 'flexible', 'compact'"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "backend": "slurm"},
     "backend must be one of local, ray"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "quick": "yes"},
     "quick takes bool"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "timeout": "x"},
     "timeout takes int or float, got 'x'"),
    ({"engines": ["llguidance"], "vocabs": {"t": "llama3:/nope/tokenizer.model"}, "data": {"d": "embedded"}},
     "[vocabs] t: vocabulary spec"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "/nope/maskbench"}},
     "[data] d: no file or folder at '/nope/maskbench'"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "source": "nativ"},
     "source must be 'native' or 'grammar'"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "memory_limit_gb": -1},
     "memory_limit_gb must be > 0"),
    ({"engines": ["llguidanse"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}}, "unknown engine"),
    ({"engines": ["llguidance"], "vocabs": {"t": "tekken"}, "data": {"d": "embedded"}, "repeat": 0},
     "limit, jobs and repeat must be >= 1"),
])
def test_a_bad_spec_says_what_and_where(doc, says) -> None:
    with pytest.raises(SweepError, match=None) as e:
        sweep_from_dict(doc)
    assert says in str(e.value)


def test_a_spec_that_is_not_toml_is_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("engines = [\n")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "is not TOML" in err and "Traceback" not in err


def test_the_spec_format_in_the_help_is_a_spec_that_loads(tmp_path, capsys) -> None:
    """``masklab sweep --help`` prints :data:`SPEC_EXAMPLE`, and that example is a spec
    ``load_sweep`` reads (every key it shows is one the reader knows)."""
    from tests._support.shared import SHARED
    from toolkit.bench.sweep import SPEC_EXAMPLE

    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = capsys.readouterr().out
    assert "memory_limit_gb" in out and "[options.no-slices]" in out
    if not (SHARED / "tokenizers" / "llama-3").is_dir():
        pytest.skip(f"the example's vocabularies are under MASKLAB_SHARED ({SHARED}), absent here")
    spec = tmp_path / "example.toml"
    spec.write_text(SPEC_EXAMPLE)
    sweep = load_sweep(spec)
    assert sweep.memory_limit_gb == 8 and sweep.source == "native" and len(list(sweep.cells())) == 3 * 2


def test_a_sweep_with_repeats_runs_each_cell_in_passes_and_reports_medians(tmp_path) -> None:
    """``repeat = 2``: every cell's (engine, item) twice, the records with their repeat; the
    sweep table's figures are the median over the repeats of each repeat's percentile."""
    import numpy as np

    from toolkit.bench.sweep import run_sweep
    from toolkit.report.sweep import sweep_table

    sweep = sweep_from_dict({"engines": ["llguidance", "xgrammar"], "vocabs": {"tekken": "tekken"},
                             "data": {"embedded": "embedded"}, "limit": 2, "seed": 5, "quick": True, "repeat": 2})
    out = tmp_path / "grid"
    run_sweep(sweep, out, progress=False)
    recs = read_records(out / "records.jsonl")
    assert sorted(r["repeat"] for r in recs) == [1] * 4 + [2] * 4
    row = sweep_table(out).set_index("engine").loc["llguidance"]
    common = {r["item"] for r in recs if r["engine"] == "xgrammar" and r["status"] == "passing"}
    mine = [r for r in recs if r["engine"] == "llguidance" and r["item"] in common]
    per = [np.percentile([t * 1e6 for r in mine if r["repeat"] == k for t in r["tbm_s"]], 50) for k in (1, 2)]
    assert common and row["items"] == len(common) and row["tbm_p50_us"] == pytest.approx(np.median(per))
