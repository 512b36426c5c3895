"""Tables and figures fit for a paper: what they share (:mod:`~toolkit.report.style`),
benchmark runs (:mod:`~toolkit.report.bench`), the end-to-end decoding runs
(:mod:`~toolkit.report.e2e`), the per-mask truth against the engines called directly
(:mod:`~toolkit.report.direct`), and ``report.md`` with all of them
(:mod:`~toolkit.report.write`, ``masklab report``)."""

from toolkit.report.bench import (
    DENSITY_CATEGORIES,
    STATUSES,
    TBM_PERCENTILES,
    TTFM_PERCENTILES,
    WORK_COLUMNS,
    ReportError,
    Runs,
    common_items,
    comparability_warnings,
    comparable,
    density_table,
    engine_table,
    load_runs,
    plot_density,
    plot_tbm_cdf,
    plot_ttfm_cdf,
    restrict,
    work_table,
)
from toolkit.report.style import engine_styles, short_vocab, to_markdown
from toolkit.report.write import write_report

__all__ = [
    "WORK_COLUMNS",
    "work_table",
    "DENSITY_CATEGORIES",
    "STATUSES",
    "TBM_PERCENTILES",
    "TTFM_PERCENTILES",
    "ReportError",
    "Runs",
    "common_items",
    "comparability_warnings",
    "comparable",
    "density_table",
    "engine_styles",
    "engine_table",
    "load_runs",
    "plot_density",
    "plot_tbm_cdf",
    "plot_ttfm_cdf",
    "restrict",
    "short_vocab",
    "to_markdown",
    "write_report",
]
