"""The ``verify`` figure: every row's relative error against its tolerance."""

from __future__ import annotations

from typing import Any

from attnreg.studies.common import FigureRecord
from attnreg.studies.verify.cases import CASES
from attnreg.studies.verify.config import VerifyConfig


def certificate_figure(rows: list[dict[str, Any]], cfg: VerifyConfig) -> FigureRecord:
    """Relative error of every check against its tolerance (log scale), one panel per dtype."""
    from attnreg.output import new_figure

    names = sorted({r["construction"] for r in rows}, key=[r["construction"] for r in rows].index)
    fig, axes = new_figure(
        1,
        len(cfg.dtypes),
        figsize=(6 * len(cfg.dtypes), 0.35 * len(names) + 1.5),
        sharey=True,
        squeeze=False,
    )
    for ax, dtype in zip(axes[0], cfg.dtypes, strict=True):
        for i, name in enumerate(names):
            mine = [r for r in rows if r["construction"] == name and r["dtype"] == dtype]
            errs = [max(r["rel_err"], 1e-18) for r in mine]
            ax.scatter(errs, [i] * len(errs), s=14, color="tab:blue", zorder=3)
            ax.scatter(
                [r["tol"] for r in mine],
                [i] * len(mine),
                marker="|",
                s=120,
                color="tab:red",
                zorder=2,
            )
        ax.set_xscale("log")
        ax.set_title(f"{dtype}: relative error (dots) vs tolerance (red bars)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(names)), names, fontsize=8)
    axes[0][0].invert_yaxis()
    return FigureRecord(
        "verify_certificate",
        "Every construction's and sequence layer's forward pass against its independent "
        f"reference over {len(CASES)} task shapes (seed {cfg.seed}); each dot is "
        "one shape, each red bar its tolerance (the far bars: the condition-scaled tolerance "
        "of the ill-conditioned shape).",
        fig,
    )
