"""Tables and figures fit for a paper: benchmark runs (``masklab report``), the end-to-end
decoding runs (:mod:`toolkit.report.e2e`) and the per-mask truth against the engines
called directly (:mod:`toolkit.report.direct`)."""

from toolkit.report.bench import (
    DENSITY_CATEGORIES,
    STATUSES,
    TBM_PERCENTILES,
    TTFM_PERCENTILES,
    ReportError,
    Runs,
    density_table,
    engine_table,
    load_runs,
    plot_density,
    plot_tbm_cdf,
    plot_ttfm_cdf,
    to_markdown,
    write_report,
)

__all__ = [
    "DENSITY_CATEGORIES",
    "density_table",
    "engine_table",
    "load_runs",
    "plot_density",
    "plot_tbm_cdf",
    "plot_ttfm_cdf",
    "ReportError",
    "Runs",
    "STATUSES",
    "TBM_PERCENTILES",
    "to_markdown",
    "TTFM_PERCENTILES",
    "write_report",
]
