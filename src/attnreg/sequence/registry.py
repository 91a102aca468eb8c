"""The registry of sequence layers: each public layer of :mod:`attnreg.sequence` with its forms,
its hooked module (where it has one), the regression it reads as, its source and the
flash-linear-attention reference it is tested against (with the conventions mapped).

Everything that walks the family iterates it: the docs' family table (:func:`family_table`);
the tests (every public layer registered, every registered fla reference present in the
installed ``fla-core``, every layer run on its :class:`Example` in every form); ``attnreg
verify`` (a row for a layer without rows of its own, against its example's numpy reference);
``attnreg bench`` (every layer timed beside P8) and the ``layers`` study (any registered layer
trainable by name). A new layer is one file of :mod:`attnreg.sequence` plus one
:func:`register` call (here, or from the user's own code).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnreg.sequence import examples as ex
from attnreg.sequence.comba import FORMS as COMBA_FORMS
from attnreg.sequence.comba import comba
from attnreg.sequence.delta_product import delta_product
from attnreg.sequence.delta_rule import delta_rule
from attnreg.sequence.examples import Shape
from attnreg.sequence.forgetting import forgetting_attention
from attnreg.sequence.generalized_delta import FORMS as GENERALIZED_DELTA_FORMS
from attnreg.sequence.generalized_delta import generalized_delta_rule
from attnreg.sequence.linear_attention import linear_attention
from attnreg.sequence.local_linear import local_linear_attention
from attnreg.sequence.log_linear import FORMS as LOG_LINEAR_FORMS
from attnreg.sequence.log_linear import log_linear_attention
from attnreg.sequence.longhorn import longhorn
from attnreg.sequence.mesa import mesa
from attnreg.sequence.modules import (
    DeltaRuleLayer,
    LinearAttentionLayer,
    LocalLinearAttentionLayer,
    LonghornLayer,
    MesaNetLayer,
    SoftmaxAttentionLayer,
)
from attnreg.sequence.momentum_delta import FORMS as MOMENTUM_DELTA_FORMS
from attnreg.sequence.momentum_delta import momentum_delta_rule
from attnreg.sequence.softmax import softmax_attention
from attnreg.sequence.stick_breaking import stick_breaking_attention
from attnreg.sequence.titans import FORMS as TITANS_FORMS
from attnreg.sequence.titans import titans
from attnreg.sequence.ttt import FORMS as TTT_FORMS
from attnreg.sequence.ttt import ttt_linear

OWN = "attnreg's reading"
"""Marks a regression reading that is attnreg's derivation rather than the source's words."""


@dataclass(frozen=True)
class Reading:
    """One configuration of a layer read as a regression: ``call`` (how it is invoked),
    the weights ``γ_{t,i}`` of the past pairs, the function class, the optimiser, the loss, the
    source, and whether the reading is attnreg's own (``own``) rather than the source's."""

    call: str
    weights: str
    function_class: str
    optimiser: str
    loss: str
    source: str
    own: bool = False
    forms: tuple[str, ...] | None = None  # where this configuration has fewer than the layer


@dataclass(frozen=True)
class FlaReference:
    """A pure-PyTorch reference of ``fla-core``: ``fla/ops/<path>/naive.py``'s ``function``,
    and how its conventions map onto ours."""

    path: str
    function: str
    conventions: str


def default_growth(length: int, d_k: int, d_v: int) -> float:
    """``8 · T · (d_k + d_v)``: the rounding-error factor of ``T`` non-expansive steps, each a
    sum of ``d_k + d_v``-term products."""
    return 8.0 * length * (d_k + d_v)


@dataclass(frozen=True)
class Example:
    """Inputs a layer is meant to run on, for everything that iterates the registry (the
    registry's tests, ``attnreg verify``, ``attnreg bench``, the ``layers`` study):
    ``draw(gen, (B, H, T, d_k, d_v), dtype)`` gives its keyword arguments (``q``, ``k``, ``v``
    and its own; :mod:`attnreg.sequence.examples`); ``reference``, where given, computes the
    output ``(B, H, T, d_v)`` in numpy from the same arguments as float64 arrays, written as the
    recurrence is defined (a layer without one is certified by rows of its own); ``growth(T,
    d_k, d_v)`` is the factor ``m`` of the bound ``|ô − o| ≤ u · m · max(1, max |o|)``."""

    draw: Callable[[torch.Generator, Shape, torch.dtype], dict[str, Any]]
    reference: Callable[..., np.ndarray] | None = None
    growth: Callable[[int, int, int], float] = default_growth


@dataclass(frozen=True)
class LayerEntry:
    """A registered layer: its public ``name``, ``function``, the ``forms`` (``mode`` values)
    it computes in, its hooked ``module`` (or ``None``), its ``readings`` (one per
    configuration), its ``fla`` references and its ``example`` inputs."""

    name: str
    function: Callable[..., torch.Tensor]
    forms: tuple[str, ...]
    readings: tuple[Reading, ...]
    fla: tuple[FlaReference, ...] = ()
    module: type | None = None
    example: Example | None = None


REGISTRY: dict[str, LayerEntry] = {}
"""Every registered layer by name, in registration order."""


def register(entry: LayerEntry) -> LayerEntry:
    """Add ``entry`` to :data:`REGISTRY` (a second entry of one name is a ``ValueError``)."""
    if entry.name in REGISTRY:
        raise ValueError(f"name: a layer named {entry.name!r} is already registered")
    REGISTRY[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove the entry ``name`` (a ``KeyError`` if there is none)."""
    del REGISTRY[name]


FUSED = ("fused", "chunk", "recurrent")
LOOP = ("recurrent",)
DIRECT = ("direct",)
LAYOUT = "layout (B, T, H, d) → ours (B, H, T, d)"
SCALE = "query scale d_k^(−1/2) → scale=d_k**-0.5"
LOG = "log-decays g → decay=exp(g)"
LMS = "½‖W k_t − v_t‖²"
STEP = "gradient step of size 1 from W = 0"


def _register_all() -> None:
    """The layers of :mod:`attnreg.sequence`."""
    register(
        LayerEntry(
            "linear_attention",
            linear_attention,
            FUSED,
            (
                Reading(
                    "linear_attention",
                    "1",
                    "linear W k",
                    STEP,
                    "½ Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖²",
                    "Katharopoulos et al. 2020",
                ),
                Reading(
                    "decay=α (B, H, T)",
                    "Π_{i<j≤t} α_j",
                    "linear",
                    STEP,
                    "the same, decayed",
                    "RetNet (Sun et al. 2023), Mamba-2 (Dao & Gu 2024)",
                ),
                Reading(
                    "decay=α (B, H, T, d_k)",
                    "Π_{i<j≤t} α_j per key channel",
                    "linear",
                    STEP + ", the pairs weighted coordinate by coordinate",
                    "the same, per channel",
                    "GLA (Yang et al. 2024)",
                    own=True,
                ),
            ),
            (
                FlaReference("linear_attn", "naive_recurrent_linear_attn", f"{LAYOUT}; {SCALE}"),
                FlaReference(
                    "retention", "naive_retention", "layout ours; per-head decays 1 − 2^(−5−h)"
                ),
                FlaReference("simple_gla", "naive_recurrent_simple_gla", f"{LAYOUT}; {LOG}"),
                FlaReference("gla", "naive_recurrent_gla", f"{LAYOUT}; per-channel {LOG}"),
            ),
            LinearAttentionLayer,
            example=Example(ex.plain),
        )
    )
    register(
        LayerEntry(
            "delta_rule",
            delta_rule,
            FUSED,
            (
                Reading(
                    "delta_rule",
                    "— (the newest pair, per step)",
                    "linear",
                    "online least squares (LMS), step β_t per token",
                    LMS,
                    "DeltaNet (Schlag et al. 2021; Yang et al. 2024)",
                ),
                Reading(
                    "decay=α (B, H, T)",
                    "—",
                    "linear, weight decay 1 − α_t",
                    "LMS with weight decay",
                    LMS,
                    "Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025)",
                ),
                Reading(
                    "decay=α (B, H, T, d_k)",
                    "—",
                    "linear, weight decay 1 − α_{t,c} per key coordinate",
                    "LMS after a per-coordinate weight decay",
                    LMS,
                    "KDA (Kimi Team 2025)",
                ),
            ),
            (
                FlaReference("delta_rule", "delta_rule_recurrence", SCALE),
                FlaReference(
                    "gated_delta_rule", "naive_recurrent_gated_delta_rule", f"{LAYOUT}; {LOG}"
                ),
                FlaReference("kda", "naive_recurrent_kda", f"{LAYOUT}; per-channel {LOG}"),
                FlaReference("kda", "naive_chunk_kda", f"{LAYOUT}; per-channel {LOG}"),
            ),
            DeltaRuleLayer,
            example=Example(ex.with_step),
        )
    )
    register(
        LayerEntry(
            "delta_product",
            delta_product,
            FUSED,
            (
                Reading(
                    "delta_product",
                    "—",
                    "linear, weight decay 1 − α_t",
                    "n_h LMS steps per token, on the token's n_h pairs",
                    "½‖W k_{t,j} − v_{t,j}‖², j = 1 … n_h",
                    "DeltaProduct (Siems et al. 2025)",
                ),
            ),
            (
                FlaReference(
                    "gated_delta_product",
                    "naive_recurrent_gated_delta_product",
                    f"{LAYOUT}; a token's n_h steps stacked on fla's time axis; {LOG}",
                ),
            ),
            example=Example(ex.delta_product_example),
        )
    )
    register(
        LayerEntry(
            "generalized_delta_rule",
            generalized_delta_rule,
            GENERALIZED_DELTA_FORMS,
            (
                Reading(
                    "generalized_delta_rule",
                    "—",
                    "linear, per-coordinate weight decay",
                    "a step on ½‖W b_t‖² with rate a_t and the write v_t k_tᵀ: LMS whose erase "
                    "and write keys may differ",
                    "½‖W b_t − v_t‖² (a_t = −η ⊙ b_t)",
                    "RWKV-7 (Peng et al. 2025)",
                    own=True,
                ),
            ),
            (
                FlaReference(
                    "generalized_delta_rule/dplr",
                    "dplr_recurrence",
                    f"fla's alpha, beta → our b, a; per-channel {LOG}; its fixed {SCALE}",
                ),
                FlaReference(
                    "generalized_delta_rule/dplr",
                    "dplr_chunkwise",
                    f"fla's alpha, beta → our b, a; per-channel {LOG}; its fixed {SCALE}",
                ),
            ),
            example=Example(ex.rwkv7_example),
        )
    )
    register(
        LayerEntry(
            "comba",
            comba,
            COMBA_FORMS,
            (
                Reading(
                    "comba",
                    "—",
                    "linear, weight decay 1 − α_t",
                    "the LMS step of instrumental-variable regression: error read at p_t, step "
                    "along k_t",
                    "½‖W p_t − v_t‖² when p_t = k_t",
                    "Comba (Hu et al. 2025)",
                    own=True,
                ),
            ),
            (FlaReference("comba", "naive_recurrent_comba", f"{LAYOUT}; {LOG}"),),
            example=Example(ex.comba_example),
        )
    )
    register(
        LayerEntry(
            "momentum_delta_rule",
            momentum_delta_rule,
            MOMENTUM_DELTA_FORMS,
            (
                Reading(
                    "momentum_delta_rule",
                    "—",
                    "linear, weight decay 1 − α_t",
                    "LMS by heavy-ball momentum μ_t (torch.optim.SGD with momentum), one step "
                    "per token",
                    "η_t ½‖Sᵀ p_t − v_t‖² (p_t = k_t)",
                    "fla's momentum delta rule",
                ),
            ),
            (
                FlaReference(
                    "momentum_delta_rule",
                    "recurrent_momentum_delta_rule_ref",
                    f"{LAYOUT}; log α, log μ → decay, momentum",
                ),
            ),
            example=Example(ex.heavy_ball),
        )
    )
    register(
        LayerEntry(
            "titans",
            titans,
            TITANS_FORMS,
            (
                Reading(
                    "titans",
                    "—",
                    "linear, weight decay 1 − α_t",
                    "online least squares with momentum (the surprise)",
                    LMS + " (the paper's has no ½)",
                    "Titans' linear memory (Behrouz, Zhong & Mirrokni 2025)",
                ),
            ),
            example=Example(ex.titans_example),
        )
    )
    register(
        LayerEntry(
            "ttt_linear",
            ttt_linear,
            TTT_FORMS,
            (
                Reading(
                    "ttt_linear",
                    "— (a mini-batch's pairs, gradients at its start)",
                    "linear; norm: k + LN(Wᵀk + b)",
                    "mini-batch gradient descent, read out in the dual form",
                    LMS + " (norm: ½‖LN(Wᵀk + b) − (v − k)‖²)",
                    "TTT-Linear (Sun et al. 2024)",
                ),
            ),
            (FlaReference("ttt", "ttt_linear", "layout ours; norm=True; η per token"),),
            example=Example(ex.ttt_example),
        )
    )
    register(
        LayerEntry(
            "longhorn",
            longhorn,
            FUSED,
            (
                Reading(
                    "longhorn",
                    "—",
                    "linear",
                    "implicit (proximal) online step argmin ‖W − W_{t−1}‖² + β‖W k − v‖²",
                    "β_t ‖W k_t − v_t‖² + ‖W − W_{t−1}‖²",
                    "Longhorn (Liu et al. 2024)",
                ),
            ),
            module=LonghornLayer,
            example=Example(ex.longhorn_example),
        )
    )
    register(
        LayerEntry(
            "mesa",
            mesa,
            ("chunk", "recurrent"),
            (
                Reading(
                    "mesa",
                    "β_i Π_{i<j≤t} α_j",
                    "linear, ridge Λ",
                    "exact solve of the ridge problem at every t",
                    "Σ γ_{t,i} ‖W k_i − v_i‖² + Σ_j λ_j ‖W e_j‖²",
                    "MesaNet (von Oswald et al. 2025)",
                ),
            ),
            (FlaReference("mesa_net", "naive_mesa_net_exact", f"{LAYOUT}; {LOG}"),),
            MesaNetLayer,
            example=Example(ex.mesa_example),
        )
    )
    register(
        LayerEntry(
            "log_linear_attention",
            log_linear_attention,
            LOG_LINEAR_FORMS,
            (
                Reading(
                    "log_linear_attention",
                    "λ_{t, ℓ(t,i)} Π_{i<j≤t} α_j, one weight per Fenwick level",
                    "linear",
                    STEP,
                    "½ Σ_{i≤t} γ_{t,i} ‖W k_i − v_i‖²",
                    "Log-linear attention (Guo et al. 2025)",
                ),
            ),
            (
                FlaReference(
                    "log_linear_attn",
                    "naive_log_linear_attn",
                    f"{LAYOUT}; {LOG}; level scales (B, T, H, L)",
                ),
            ),
            example=Example(ex.log_linear_example),
        )
    )
    register(
        LayerEntry(
            "softmax_attention",
            softmax_attention,
            DIRECT,
            (
                Reading(
                    "softmax_attention",
                    "e^{scale · q_tᵀ k_i}",
                    "constant b",
                    "closed form (the weighted mean): Nadaraya–Watson",
                    "Σ_{i≤t} γ_{t,i} ‖v_i − b‖²",
                    "Vaswani et al. 2017",
                ),
            ),
            module=SoftmaxAttentionLayer,
            example=Example(ex.plain),
        )
    )
    register(
        LayerEntry(
            "forgetting_attention",
            forgetting_attention,
            DIRECT,
            (
                Reading(
                    "forgetting_attention",
                    "e^{scale · q_tᵀ k_i} Π_{i<j≤t} f_j",
                    "constant b",
                    "closed form (the weighted mean)",
                    "Σ_{i≤t} γ_{t,i} ‖v_i − b‖²",
                    "Forgetting Transformer (Lin et al. 2025)",
                ),
            ),
            (
                FlaReference(
                    "forgetting_attn",
                    "naive_forgetting_attn",
                    f"{LAYOUT}; log forget gates g → forget=exp(g)",
                ),
            ),
            example=Example(ex.forgetting_example),
        )
    )
    register(
        LayerEntry(
            "stick_breaking_attention",
            stick_breaking_attention,
            DIRECT,
            (
                Reading(
                    "stick_breaking_attention",
                    "σ(z_{t,i}) Π_{i<l<t} (1 − σ(z_{t,l})), the rest on b = 0",
                    "constant b",
                    "closed form (a weighted mean shrunk to 0)",
                    "Σ_i A_{t,i} ‖v_i − b‖² + r_t ‖b‖²",
                    "Tan et al. 2025",
                    own=True,
                ),
            ),
            (FlaReference("stickbreaking_attn", "naive_stickbreaking_attn", LAYOUT),),
            example=Example(ex.plain),
        )
    )
    register(
        LayerEntry(
            "local_linear_attention",
            local_linear_attention,
            DIRECT,
            (
                Reading(
                    "local_linear_attention",
                    "e^{scale · q_tᵀ k_i}",
                    "affine b + W (k − q_t), ridge on W",
                    "closed form (weighted local-linear ridge)",
                    "Σ_{i≤t} γ_{t,i} ‖v_i − b − W (k_i − q_t)‖² + λ ‖W‖²",
                    "Zuo et al. 2025, arXiv 2510.01450",
                ),
            ),
            module=LocalLinearAttentionLayer,
            example=Example(ex.local_linear_example),
        )
    )


_register_all()


def family_table(exactness: Mapping[str, str] | None = None) -> str:
    """The family table in Markdown, one row per registered configuration: the call, the
    weights ``γ_{t,i}``, the function class, the optimiser, the loss, the forms and the source
    (attnreg's own readings marked); on each layer's first row, the flash-linear-attention
    references its conformance tests compare it with and, given ``exactness`` (layer name →
    a short text, e.g. ``attnreg verify``'s rows passed), its exactness."""
    head = "| layer | weights `γ_{t,i}` | function class | optimiser | loss | forms | source |"
    rule = "|---|---|---|---|---|---|---|"
    if exactness is not None:
        head += " exact (`attnreg verify`) |"
        rule += "---|"
    lines = [head + " agrees with (fla `naive.py`) |", rule + "---|"]
    for entry in REGISTRY.values():
        for n, reading in enumerate(entry.readings):
            call = (
                f"`{entry.name}`"
                if reading.call == entry.name
                else f"`{entry.name}({reading.call})`"
            )
            optimiser = reading.optimiser + (f" ({OWN})" if reading.own else "")
            forms = reading.forms or entry.forms
            cells = [
                call,
                f"`{reading.weights}`",
                reading.function_class,
                optimiser,
                f"`{reading.loss}`",
                ", ".join(forms),
                reading.source,
            ]
            if exactness is not None:
                cells.append(exactness.get(entry.name, "—") if n == 0 else "")
            fla = ", ".join(f"`{f.path}: {f.function}`" for f in entry.fla) or "— (none in fla)"
            cells.append(fla if n == 0 else "")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
