"""The one attention core: ``sep(β · sim(Q, K)) · V · W_O``, with named hook points.

Every construction, trainable model and attention-form estimator of attnreg computes its
attention here. The form is the Universal Hopfield one of Millidge et al. (2022, "Universal
Hopfield Networks"): similarity, separation, projection. It is attention (``sim`` = scaled dot,
``sep`` = softmax; Vaswani et al. 2017), regression (``sim`` = whitened dot ``q S⁻¹ kᵀ``,
``sep`` = identity; Goulet Coulombe 2025, Tan & Zhao 2026), a gradient-descent step (``sim`` =
dot, ``sep`` = identity, ``β = η/N``; von Oswald et al. 2023) and associative memory (``sep`` =
softmax, power, signed power or max; Ramsauer et al. 2021, Krotov & Hopfield 2016).

Shapes: ``Q (B, M, d)``, ``K (B, N, d)``, ``V (B, N, dv)``; optionally a head axis,
``(B, H, ·, ·)``, whose heads are summed after the output projection (concatenating the heads
and projecting is the same sum). A bilinear similarity may carry a metric ``M`` (``(d, d)``,
per task ``(B, d, d)`` or per head ``(H, d, d)``): ``sim(q, k) = q M kᵀ``. ``W_O`` (``(dv, do)``,
per task or per head) is the output projection.

**Weights.** ``w = sep(β · sim(q, k))`` over the N keys. ``normalize`` divides them by their
mass: ``Σ_j w_j`` for identity and power, ``Σ_j |w_j|`` for signed power (so ``signed_power``
with ``normalize`` gives ``sᵖ / Σ_j |s_j|ᵖ`` for odd p, and ``power`` with ``normalize`` gives it
for even p: the normalised polynomial of Millidge et al. 2022). Softmax and max weights sum to
one already. The **context mean** (``mean=True``) divides the weights by N: ``w_j / N`` for
identity, power and signed power (for identity the weights are the scores, so ``hook_scores``
holds ``β · sim / N`` too); softmax and max refuse it (their weights have a fixed sum), and so
does ``normalize`` (it divides by the weights' own sum, which a mean would not change).

**Paths** (:func:`choose_path`; ``forward(..., path=...)`` forces one). Nothing of size
``M × N`` is held whole except on the explicit path.

============  ==========================================  ===================================
path          chosen when                                 may be forced when
============  ==========================================  ===================================
explicit      ``mask_self``, or a hook on ``hook_scores``  always
              or ``hook_weights``
linear        identity separation, bilinear similarity,   the same, no ``mask_self``, no hook
              no ``normalize``, no ``offset``             on ``hook_scores``/``hook_weights``
fused         softmax separation, bilinear similarity,    the same, no ``mask_self``, no hook
              no ``offset``
streamed      every other case                            no ``mask_self``, no hook
============  ==========================================  ===================================

* **explicit** — scores, separation, weights, ``weights · V``; the cached tensors are the ones
  that make the output.
* **linear** — ``Q (β M (Kᵀ V) W_O)`` (:mod:`attnreg.core.linear`).
* **fused** — PyTorch's ``scaled_dot_product_attention`` (:mod:`attnreg.core.streamed`).
* **streamed** — blocks of keys sized to ``memory_budget`` bytes (:mod:`attnreg.core.streamed`).

**Hooks observe; they do not steer.** Hook points (TransformerLens style, Nanda et al. 2022):
``hook_q``, ``hook_k``, ``hook_v`` (as given, before a tensor β scales the queries),
``hook_scores`` (``β · sim``, before separation), ``hook_weights`` (after separation,
``normalize`` and the mean), ``hook_output``. A read-only hook on ``hook_q``/``k``/``v``/
``output`` leaves the path, and the output, bit for bit as it was. A hook on ``hook_scores``
or ``hook_weights`` needs the explicit scores: the output is then computed on the explicit path
from the hooked tensors, and differs from the fast path's by rounding only. With ``u`` the unit
roundoff, ``γ_n = n u / (1 − n u)``, ``n = 2d + N + dv + do`` and ``R`` the output computed
from absolute values (``|β| |Q||M||K|ᵀ`` for bilinear scores, ``|β| |s|`` for distances, times
``|V| |W_O|``), componentwise

* identity: ``|Δ| ≤ 2 γ_n R``; power and signed power (weights ``|s|ᵖ``): ``|Δ| ≤ 2 p γ_n R``;
* softmax (weights ``w``, ``R = w |V| |W_O|``): ``|Δ| ≤ 2 (γ_n + 2 γ_d max_j |β s_j|) R``;
* ``normalize``: ``R`` from the weights divided by ``|Σ_j w_j|``, the bound multiplied by
  ``1 + Σ_j |w_j| / |Σ_j w_j|`` (the condition of the mass);
* max: the same value row, unless two scores tie within ``γ_d`` of each other.

:class:`attnreg.core.hooks.Hooked` gives any module holding cores ``run_with_cache`` and
``run_with_hooks``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnreg.core.hooks import HookPoint
from attnreg.core.linear import linear_attention
from attnreg.core.scores import (
    BILINEAR,
    MEAN_SEPARATIONS,
    SEPARATIONS,
    SIMILARITIES,
    separate,
    similarity_scores,
    weight_mass,
)
from attnreg.core.streamed import DEFAULT_MEMORY_BUDGET, fused_softmax, streamed
from attnreg.core.validation import check_choice, check_positive, check_positive_int

PATHS = ("explicit", "linear", "fused", "streamed")


def choose_path(
    similarity: str,
    separation: str,
    *,
    normalize: bool = False,
    mask_self: bool = False,
    hooked: bool = False,
    path: str | None = None,
    shifted: bool = False,
) -> str:
    """The path :class:`Attention` takes (the table in the module docstring).

    ``hooked``: a hook is registered on ``hook_scores`` or ``hook_weights``; ``shifted``: the
    scores carry a per-query offset (neither the linear nor the fused path adds one). Without
    ``path`` the fastest path that honours the arguments; with ``path`` that path, or a
    ``ValueError`` naming ``path`` when it cannot honour them.
    """
    bilinear = similarity in BILINEAR
    linear = bilinear and separation == "identity" and not normalize and not shifted
    fused = bilinear and separation == "softmax" and not shifted
    if path is None:
        if mask_self or hooked:
            return "explicit"
        return "linear" if linear else "fused" if fused else "streamed"
    check_choice("path", path, PATHS)
    if path == "explicit":
        return path
    if mask_self or hooked:
        why = "mask_self=True" if mask_self else "a hook on hook_scores or hook_weights"
        raise ValueError(f"path: {path!r} cannot honour {why}; only 'explicit' holds the scores")
    if path == "linear" and not linear:
        raise ValueError(
            "path: 'linear' needs identity separation, a bilinear similarity (dot, scaled_dot, "
            f"whitened_dot), normalize=False and no offset; got {similarity}/{separation}, "
            f"normalize={normalize}, offset={'given' if shifted else 'none'}"
        )
    if path == "fused" and not fused:
        raise ValueError(
            "path: 'fused' needs softmax separation, a bilinear similarity (dot, "
            f"scaled_dot, whitened_dot) and no offset; got {similarity}/{separation}, "
            f"offset={'given' if shifted else 'none'}"
        )
    return path


def _tensor_beta(beta: torch.Tensor, bilinear: bool) -> torch.Tensor:
    """A tensor β as a 0-d tensor, checked: one element, and a bilinear similarity (where it
    can scale the queries)."""
    if beta.numel() != 1:
        raise ValueError(f"beta: a tensor β must have one element, got shape {tuple(beta.shape)}")
    if not bilinear:
        raise ValueError(
            "beta: a tensor β needs a bilinear similarity (dot, scaled_dot, "
            "whitened_dot); pass a float for the others"
        )
    return beta.reshape(())


def _heads(out: torch.Tensor) -> torch.Tensor:
    """Sum a head axis ``(B, H, M, do)`` away; 3-D outputs pass through."""
    return out.sum(1) if out.ndim == 4 else out


class Attention(nn.Module):
    """``out = Σ_heads sep(β · sim(Q, K)) · V · W_O`` (see the module docstring for the
    weights, the context mean, the paths and the hooks' rounding bound).

    ``similarity``, ``separation``, ``beta`` (inverse temperature, ``> 0``), ``power`` (p of
    ``power`` and ``signed_power``), ``normalize`` (divide identity / power / signed power
    weights by their mass over the keys) and ``memory_budget`` (bytes for score blocks on the
    streamed path) are fixed at construction; ``forward`` may override ``beta`` per call.
    """

    def __init__(
        self,
        similarity: str = "dot",
        separation: str = "identity",
        beta: float = 1.0,
        power: int = 2,
        normalize: bool = False,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        super().__init__()
        self.similarity = check_choice("similarity", similarity, SIMILARITIES)
        self.separation = check_choice("separation", separation, SEPARATIONS)
        self.beta = check_positive("beta", beta)
        self.power = check_positive_int("power", power)
        self.normalize = bool(normalize)
        self.memory_budget = int(check_positive("memory_budget", memory_budget))
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_scores, self.hook_weights = HookPoint(), HookPoint()
        self.hook_output = HookPoint()

    def extra_repr(self) -> str:
        return f"similarity={self.similarity}, separation={self.separation}, beta={self.beta:g}"

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        metric: torch.Tensor | None = None,
        w_o: torch.Tensor | None = None,
        beta: float | torch.Tensor | None = None,
        mean: bool = False,
        mask_self: bool = False,
        path: str | None = None,
        offset: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, [H,] M, d), (B, [H,] N, d), (B, [H,] N, dv) -> (B, M, do)``.

        ``metric``: the bilinear similarity's ``M`` (refused by the distances); ``w_o``: output
        projection (``do = dv`` without it); ``beta``: overrides the module's β for this call —
        a one-element tensor (e.g. a learned temperature) stays in the autograd graph: with a
        bilinear similarity ``β · (q M) · k = ((β q) M) · k``, so it scales the queries after
        ``hook_q``; ``mean``: the context mean, weights divided by N; ``mask_self``: query j
        does not attend to key j (the queries are the keys); ``path``: force one of
        :data:`PATHS` (a ``ValueError`` if it cannot honour the arguments); ``offset``: one
        shift per query, ``(B, [H,] M, 1)``, added to the scores ``β · sim`` before separation
        (e.g. to make distance scores non-negative for a power; it rules out the linear and
        fused paths).
        """
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        bilinear = self.similarity in BILINEAR
        beta_value = self.beta if beta is None else beta
        if isinstance(beta_value, torch.Tensor):
            q = q * _tensor_beta(beta_value, bilinear).to(q.dtype)
            beta_value = 1.0
        if self.similarity == "whitened_dot" and metric is None:
            raise ValueError("metric: whitened_dot needs the metric matrix M (e.g. S⁻¹)")
        if metric is not None and not bilinear:
            raise ValueError(
                f"metric: only a bilinear similarity (dot, scaled_dot, whitened_dot) takes a "
                f"metric, not {self.similarity}"
            )
        if mean and self.separation not in MEAN_SEPARATIONS:
            raise ValueError(
                "mean: a context mean needs identity, power or signed_power separation"
            )
        if mean and self.normalize:
            raise ValueError("mean: normalize already divides the weights by their sum")
        hooked = self.hook_scores.active or self.hook_weights.active
        chosen = choose_path(
            self.similarity,
            self.separation,
            normalize=self.normalize,
            mask_self=mask_self,
            hooked=hooked,
            path=path,
            shifted=offset is not None,
        )
        mean_divisor = k.shape[-2] if mean else 1
        if chosen == "explicit":
            out = self._explicit(
                q, k, v, metric, w_o, float(beta_value), mask_self, mean_divisor, offset
            )
            return self.hook_output(out)
        scale = float(beta_value)
        if self.similarity == "scaled_dot":
            scale = scale / math.sqrt(q.shape[-1])
        if chosen == "linear":
            return self.hook_output(linear_attention(q, k, v, metric, w_o, scale, mean_divisor))
        if metric is not None:
            q = q @ metric
        if chosen == "fused":
            out = fused_softmax(q, k, v, scale)
        else:
            out = streamed(
                q,
                k,
                v,
                self.similarity,
                self.separation,
                scale,
                self.power,
                self.normalize,
                mean_divisor,
                self.memory_budget,
                offset,
            )
        return self.hook_output(_heads(out if w_o is None else out @ w_o))

    def _explicit(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        metric: torch.Tensor | None,
        w_o: torch.Tensor | None,
        beta: float,
        mask_self: bool,
        mean_divisor: int,
        offset: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scores, separation and weights held whole (hooks read these very tensors)."""
        scores = beta * similarity_scores(q, k, self.similarity, metric)
        if offset is not None:
            scores = scores + offset
        linear_mean = mean_divisor != 1 and self.separation == "identity"
        scores = self.hook_scores(scores / mean_divisor if linear_mean else scores)
        if mask_self:
            if scores.shape[-1] != scores.shape[-2]:
                raise ValueError(
                    f"mask_self: the queries must be the keys; scores shape {tuple(scores.shape)}"
                )
            eye = torch.eye(scores.shape[-1], dtype=torch.bool, device=scores.device)
            dropped = 0.0 if self.separation in MEAN_SEPARATIONS else -math.inf
            scores = scores.masked_fill(eye, dropped)
        weights = separate(scores, self.separation, self.power)
        if self.normalize and self.separation in MEAN_SEPARATIONS:
            weights = weights / weight_mass(weights, self.separation)
        if mean_divisor != 1 and not linear_mean:
            weights = weights / mean_divisor
        weights = self.hook_weights(weights)
        out = weights @ v
        return _heads(out if w_o is None else out @ w_o)
