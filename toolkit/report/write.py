"""``report.md``: every table and figure of one or more benchmark runs
(:mod:`toolkit.report.sections`, in order), with the end-to-end decoding runs
(:mod:`toolkit.report.e2e`) found beside them (``masklab report``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from toolkit.bench.records import records_file
from toolkit.report.bench import ReportError, as_dirs, load_runs
from toolkit.report.e2e import e2e_sections, find_generate_runs
from toolkit.report.sections import SECTIONS, context
from toolkit.report.stats import DEFAULT_BOOT

#: the report's figure styles: the screen's alone, or the paper looks too
STYLES: tuple[str, ...] = ("screen", "paper")

__all__ = ["STYLES", "write_report"]


def write_report(
    dirs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    all_items: bool = False,
    sizes: bool = False,
    pdf: bool = False,
    boot: int = DEFAULT_BOOT,
    tidy: bool = False,
    style: str = "screen",
    explain_budget: float = 0.0,
) -> Path:
    """Load ``dirs`` and write the report into ``out`` (default: the first directory).

    A directory holding ``records.jsonl`` is a bench run: the report gets
    ``engines.csv``, ``density.csv``, ``tbm_cdf.png``, ``ttfm_cdf.png`` and
    ``density.png``.  Any other directory is searched for ``masklab generate``
    runs (:mod:`toolkit.report.e2e`): the report gets the end-to-end section, ``e2e.csv``,
    ``apply_kernels.csv``, ``e2e_overhead.png`` (overhead vs batch size) and
    ``e2e_steps.png``.  Figures are PNG only; ``pdf`` writes a PDF of each beside its
    PNG (same stem) and links it from ``report.md``.  Returns the path of ``report.md``.  Raises
    :class:`ReportError` (a ``ValueError``) for a directory that is neither, or a
    bench run that cannot be read or has no records.

    Timing tables, the density table and the figures are over the items every engine
    passed (:func:`comparable`; ``all_items``: each engine's own), the outcome table over
    every record; the report opens with :func:`comparability_warnings`.  ``sizes`` adds
    ``size.png``, TTFM and memory against grammar size (:func:`plot_size`; it reads
    every item's grammar again, so it is asked for).  ``boot``: bootstrap draws of the
    timing tables' 95 % intervals (:mod:`toolkit.report.stats`; 0: figures alone).  ``tidy``:
    also ``items.parquet`` and ``masks.parquet`` with CSV twins (:mod:`toolkit.report.tidy`).
    ``style``: ``"screen"``, or ``"paper"``: every figure also as ``STEM-column`` (3.3 in)
    and ``STEM-page`` (6.9 in), PDF and PNG, 8 pt text, no titles (:data:`~toolkit.report.style.LOOKS`).
    ``explain_budget``: seconds to re-run the pairs of engines whose masks differ and name
    why, documented or not (:func:`~toolkit.report.bench.difference_causes`; 0: only
    causes cached in the run folders).
    """
    paths = as_dirs(dirs)
    if not paths:
        raise ReportError("no run directory given")
    for d in paths:
        if not d.is_dir():
            raise ReportError(f"{d}: not a directory")
    bench = [d for d in paths if records_file(d).is_file()]
    others = [d for d in paths if d not in bench]
    out_dir = Path(out) if out is not None else paths[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    e2e_lines: list[str] = []
    n_gen = 0
    if others:
        for d in others:
            if not find_generate_runs([d]):
                raise ReportError(f"{d}: no records.jsonl (a masklab bench run) and no masklab generate "
                                  "run (run.json with a summary, steps.csv) in it or below it")
        e2e_lines, n_gen = e2e_sections(others, out_dir, pdf=pdf, boot=boot, style=style)
    if not bench:
        lines = ["# masklab end-to-end report", "",
                 f"{n_gen} generate run{'s' if n_gen != 1 else ''} from {', '.join(f'`{d}`' for d in others)}", ""]
        report = out_dir / "report.md"
        report.write_text("\n".join(lines + e2e_lines).rstrip() + "\n", encoding="utf-8")
        return report
    if style not in STYLES:
        raise ReportError(f"style must be one of {', '.join(STYLES)}, not {style!r}")
    if boot < 0:
        raise ReportError(f"boot must be 0 (no intervals) or more draws, got {boot}")
    if not explain_budget >= 0:
        raise ReportError(f"explain_budget must be 0 (cached causes only) or more seconds, got {explain_budget}")
    ctx = context(load_runs(bench), out_dir, bench, all_items=all_items, sizes=sizes, pdf=pdf, boot=boot,
                  tidy=tidy, style=style, explain_budget=explain_budget)
    lines = [line for section in SECTIONS for line in section(ctx)]
    report = out_dir / "report.md"
    report.write_text("\n".join([*lines, "", *e2e_lines]).rstrip() + "\n", encoding="utf-8")
    return report
