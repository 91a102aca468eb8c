"""The one attention core: ``sep(β · sim(Q, K)) · V · W_O``, with named hook points.

Every construction, trainable model and attention-form estimator of attnreg computes its
attention here. The form is the Universal Hopfield one of Millidge et al. (2022, "Universal
Hopfield Networks"): similarity, separation, projection. It is attention (``sim`` = scaled dot,
``sep`` = softmax; Vaswani et al. 2017), regression (``sim`` = whitened dot ``q S⁻¹ kᵀ``,
``sep`` = identity; Goulet Coulombe 2025, Tan & Zhao 2026), a gradient-descent step (``sim`` =
dot, ``sep`` = identity, ``β = η/N``; von Oswald et al. 2023) and associative memory (``sep`` =
softmax, power or max; Ramsauer et al. 2021, Krotov & Hopfield 2016).

Shapes: ``Q (B, M, d)``, ``K (B, N, d)``, ``V (B, N, dv)``; optionally a head axis,
``(B, H, ·, ·)``, whose heads are summed after the output projection (concatenating the heads
and projecting is the same sum). A bilinear similarity may carry a metric ``M`` (``(d, d)``,
per task ``(B, d, d)`` or per head ``(H, d, d)``): ``sim(q, k) = q M kᵀ``. ``W_O`` (``(dv, do)``,
per task or per head) is the output projection.

Paths (one ``forward``, chosen by the arguments; nothing of size ``M × N`` is held whole unless a
hook on the scores or weights asks for it):

* **explicit** — scores, separation, weights, ``weights · V``: taken when a hook reads or edits
  ``hook_scores`` / ``hook_weights``, or when each query's own key is masked (``mask_self``).
  The cached tensors are the ones that make the output.
* **linear** — identity separation, bilinear similarity: ``Q (β M (Kᵀ V) W_O)``, linear in N
  and M, evaluated one block of about 1 MiB of tasks at a time (so many small tasks stay in
  cache). If the state overflows because of features the metric ignores (targets at 1e300
  in the tokens), the metric moves to the key side, where its zero rows keep them out.
* **fused softmax** — softmax separation, bilinear similarity: PyTorch's fused
  ``scaled_dot_product_attention`` (on the CPU a flash-attention kernel: tiles of queries ×
  keys with an online softmax). Values of another width than the keys are zero-padded to one
  head width (zero value columns, or zero query/key columns, change nothing).
* **streamed** — every other case: blocks of keys sized to ``memory_budget`` bytes, with a
  running max and sum for softmax (the online softmax of Milakov & Gimelshein 2018), a running
  arg-max for ``max``, plain accumulation for identity and power.

Hook points (TransformerLens style, Nanda et al. 2022): ``hook_q``, ``hook_k``, ``hook_v``,
``hook_scores`` (``β · sim``, before separation), ``hook_weights`` (after separation),
``hook_output``. :class:`Hooked` gives any module holding attention cores ``run_with_cache`` and
``run_with_hooks``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.nn.functional import pad, scaled_dot_product_attention

from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
    result_dtype,
)
from attnreg.core.whitening import whitening_matrix

SIMILARITIES = ("dot", "scaled_dot", "whitened_dot", "euclidean", "manhattan")
UHN_SEPARATIONS = ("identity", "softmax", "power", "max")
SEPARATIONS = (*UHN_SEPARATIONS, "signed_power")
BILINEAR = ("dot", "scaled_dot", "whitened_dot")
DEFAULT_MEMORY_BUDGET = 256 * 2**20
TASK_BLOCK_BYTES = 2**20

HookFn = Callable[[torch.Tensor, str], torch.Tensor | None]


# ------------------------------------------------------------------------------- hook points


class HookPoint(nn.Module):
    """An identity on the forward path. Forward hooks registered on it read the tensor that
    flows through (``run_with_cache``) or replace it (``run_with_hooks``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @property
    def active(self) -> bool:
        """Whether any hook is registered here (the explicit path is then taken)."""
        return bool(self._forward_hooks)


class Hooked(nn.Module):
    """A module whose attention cores can be read and edited by hook name.

    Names are module paths, e.g. ``"attn.hook_scores"`` or ``"layers.0.attn.hook_weights"``
    (:meth:`hook_names` lists them). Both runners call ``predict`` (the one signature
    ``predict(x_ctx, y_ctx, x_query)``) unless ``method`` names another method.
    """

    def hook_names(self) -> list[str]:
        """Every hook point below this module, by name."""
        return [name for name, m in self.named_modules() if isinstance(m, HookPoint)]

    @contextmanager
    def hooks(self, hooks: Sequence[tuple[str, HookFn]]) -> Iterator[None]:
        """Register ``(name, fn)`` hooks for the duration of the block; ``fn(tensor, name)``
        returns a replacement tensor or ``None`` (read only)."""
        points = {name: m for name, m in self.named_modules() if isinstance(m, HookPoint)}
        handles = []
        try:
            for name, fn in hooks:
                if name not in points:
                    raise ValueError(
                        f"hooks: no hook point {name!r}; valid names are {', '.join(points)}"
                    )
                handles.append(points[name].register_forward_hook(_adapter(fn, name)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def run_with_cache(
        self,
        *args: Any,
        names: Sequence[str] | None = None,
        method: str = "predict",
        **kwargs: Any,
    ) -> tuple[Any, dict[str, torch.Tensor]]:
        """Run ``method(*args, **kwargs)`` and return ``(output, cache)``: the detached tensor
        of every hook point (or only ``names``) as it flowed through the forward pass that made
        the output.
        Cached tensors keep the core's batched shapes (``(B, …)``, with a head axis where the
        module has one), also when ``predict`` was given unbatched inputs."""
        cache: dict[str, torch.Tensor] = {}

        def keep(tensor: torch.Tensor, name: str) -> None:
            cache[name] = tensor.detach()

        wanted = self.hook_names() if names is None else list(names)
        with self.hooks([(name, keep) for name in wanted]):
            out = getattr(self, method)(*args, **kwargs)
        return out, cache

    def run_with_hooks(
        self,
        *args: Any,
        hooks: Sequence[tuple[str, HookFn]],
        method: str = "predict",
        **kwargs: Any,
    ) -> Any:
        """Run ``method(*args, **kwargs)`` with the hooks ``(name, fn)`` in place (``fn`` may
        edit)."""
        with self.hooks(hooks):
            return getattr(self, method)(*args, **kwargs)


def _adapter(fn: HookFn, name: str) -> Callable[[nn.Module, Any, torch.Tensor], Any]:
    def hook(_module: nn.Module, _inputs: Any, output: torch.Tensor) -> Any:
        return fn(output, name)

    return hook


# ------------------------------------------------------------------ similarity and separation


def similarity_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    similarity: str,
    metric: torch.Tensor | None = None,
) -> torch.Tensor:
    """``sim(Q, K)`` of shape ``(…, M, N)``.

    dot ``q M kᵀ`` (``M = I`` without a metric); scaled_dot ``q M kᵀ/√d``; whitened_dot ``q M kᵀ``
    with ``M`` required (e.g. ``S⁻¹``); euclidean ``−‖q − k‖₂``; manhattan ``−‖q − k‖₁``
    (Millidge et al. 2022, Table 1).
    """
    check_choice("similarity", similarity, SIMILARITIES)
    if similarity in BILINEAR:
        if similarity == "whitened_dot" and metric is None:
            raise ValueError("metric: whitened_dot needs the metric matrix M (e.g. S⁻¹)")
        q = queries if metric is None else queries @ metric
        scores = q @ keys.mT
        return scores / math.sqrt(queries.shape[-1]) if similarity == "scaled_dot" else scores
    if similarity == "euclidean":
        return -torch.cdist(queries, keys, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")
    return -torch.cdist(queries, keys, p=1.0)


def separate(scores: torch.Tensor, separation: str, power: int = 2) -> torch.Tensor:
    """``sep(scores)`` along the last (key) axis: identity, softmax, ``sᵖ``, signed power
    ``sign(s)·|s|ᵖ`` (the derivative of the energy ``|s|ᵖ⁺¹/(p+1)``), or one-hot arg-max."""
    check_choice("separation", separation, SEPARATIONS)
    if separation == "identity":
        return scores
    if separation == "softmax":
        return torch.softmax(scores, dim=-1)
    if separation == "power":
        return scores.pow(power)
    if separation == "signed_power":
        return scores.sign() * scores.abs().pow(power)
    hot = torch.zeros_like(scores)
    return hot.scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)


def chunk_sizes(batch: int, m: int, n: int, itemsize: int, memory_budget: int) -> tuple[int, int]:
    """Query and key block sizes so that the score temporaries of one block fit the budget.

    At most three score-sized temporaries live at once (scores, a mask or the distance
    kernel's scratch, the weighted block), so one ``batch × q × k`` block holds
    ``memory_budget / (3 · itemsize · batch)`` elements. Queries take up to 1024 rows; keys
    fill the rest of the budget.
    """
    elements = max(1, memory_budget // (3 * itemsize * batch))
    q_block = min(m, 1024, max(1, elements // min(n, 4096)))
    k_block = max(1, min(n, elements // q_block))
    return q_block, k_block


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``X W`` for token batches ``(B, N, d)`` and per-task weights ``(B, d, k)``.

    Many small tasks (``B > 1``, ``N ≤ 1024``) are evaluated as ``(Wᵀ Xᵀ)ᵀ``, the same product
    in the layout PyTorch's CPU batched matmul runs fastest (``benchmarks/README.md``, P1).
    """
    if x.ndim == 3 and w.ndim == 3 and x.shape[0] > 1 and x.shape[-2] <= 1024:
        return (w.mT @ x.mT).mT
    return x @ w


def gram(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``Kᵀ V`` summed over the tokens; one value column of many tasks as ``(Vᵀ K)ᵀ``."""
    if v.shape[-1] == 1 and k.shape[0] > 1:
        return (v.mT @ k).mT
    return k.mT @ v


def task_blocks(batch: int, per_task_bytes: int) -> list[slice]:
    """Slices of the task axis covering about ``TASK_BLOCK_BYTES`` each (at least one task)."""
    step = max(1, TASK_BLOCK_BYTES // max(1, per_task_bytes))
    return [slice(start, min(start + step, batch)) for start in range(0, batch, step)]


# ------------------------------------------------------------------------------ the module


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


class Attention(nn.Module):
    """``out = Σ_heads sep(β · sim(Q, K)) · V · W_O`` (see the module docstring for the paths).

    ``similarity``, ``separation``, ``beta`` (inverse temperature, ``> 0``), ``power`` (for
    ``separation="power"``), ``normalize`` (divide identity / power weights by their sum over
    keys) and ``memory_budget`` (bytes for score blocks on the streamed path) are fixed at
    construction; ``forward`` may override ``beta`` per call (e.g. ``1/N`` for a context mean).
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
    ) -> torch.Tensor:
        """``(B, [H,] M, d), (B, [H,] N, d), (B, [H,] N, dv) -> (B, M, do)``.

        ``metric``: the bilinear similarity's ``M``; ``w_o``: output projection (``do = dv``
        without it); ``beta``: overrides the module's β for this call — a one-element tensor
        (e.g. a learned temperature) stays in the autograd graph: with a bilinear similarity
        ``β · (q M) · k = ((β q) M) · k``, so it scales the queries after ``hook_q``; ``mean``:
        the sum over the N keys is a mean (identity / power separation: scores divided by N);
        ``mask_self``: query j does not attend to key j (the queries are the keys).
        """
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        bilinear = self.similarity in BILINEAR
        if isinstance(beta, torch.Tensor):
            q = q * _tensor_beta(beta, bilinear).to(q.dtype)
            beta = 1.0
        scale = self.beta if beta is None else float(beta)
        if self.similarity == "whitened_dot" and metric is None:
            raise ValueError("metric: whitened_dot needs the metric matrix M (e.g. S⁻¹)")
        if mean and self.separation not in ("identity", "power", "signed_power"):
            raise ValueError(
                "mean: a context mean needs identity, power or signed_power separation"
            )
        n = k.shape[-2] if mean else 1
        if mask_self or self.hook_scores.active or self.hook_weights.active:
            out = self._explicit(q, k, v, metric, w_o, scale, mask_self, n)
        elif self.separation == "identity" and bilinear and not self.normalize:
            out = self._linear(q, k, v, metric, w_o, scale, n)
        else:
            if bilinear:
                q, scale = self._fold(q, metric, scale)
            if self.separation == "softmax" and bilinear:
                out = _fused_softmax(q, k, v, scale)
            else:
                out = self._streamed(q, k, v, scale)
            out = _heads(out if w_o is None else out @ w_o)
        return self.hook_output(out)

    def _fold(
        self, q: torch.Tensor, metric: torch.Tensor | None, beta: float
    ) -> tuple[torch.Tensor, float]:
        """Fold a bilinear similarity into the queries: ``β · sim(q, k) = scale · (q M) · k``."""
        qm = q if metric is None else q @ metric
        if self.similarity == "scaled_dot":
            beta = beta / math.sqrt(q.shape[-1])
        return qm, beta

    def _explicit(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        metric: torch.Tensor | None,
        w_o: torch.Tensor | None,
        beta: float,
        mask_self: bool,
        n: int = 1,
    ) -> torch.Tensor:
        """Scores, separation and weights held whole (hooks read these very tensors)."""
        scores = beta * similarity_scores(q, k, self.similarity, metric)
        scores = self.hook_scores(scores / n if n != 1 else scores)
        if mask_self:
            if scores.shape[-1] != scores.shape[-2]:
                raise ValueError(
                    f"mask_self: the queries must be the keys; scores shape {tuple(scores.shape)}"
                )
            eye = torch.eye(scores.shape[-1], dtype=torch.bool, device=scores.device)
            dropped = 0.0 if self.separation not in ("softmax", "max") else -math.inf
            scores = scores.masked_fill(eye, dropped)
        weights = separate(scores, self.separation, self.power)
        if self.normalize and self.separation == "signed_power":
            weights = weights / weights.abs().sum(-1, keepdim=True)
        elif self.normalize and self.separation in ("identity", "power"):
            weights = weights / weights.sum(-1, keepdim=True)
        weights = self.hook_weights(weights)
        out = weights @ v
        return _heads(out if w_o is None else out @ w_o)

    def _linear(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        metric: torch.Tensor | None,
        w_o: torch.Tensor | None,
        beta: float,
        n: int = 1,
    ) -> torch.Tensor:
        """``Q (β M (Kᵀ V / n) W_O)`` one block of tasks at a time: the ``d × do`` state first,
        so no ``M × N`` matrix and no ``M × d`` intermediate besides ``Q`` is formed. Keys,
        values or queries shared by every head (a stride-0 head axis) are multiplied once."""
        if self.similarity == "scaled_dot":
            beta = beta / math.sqrt(q.shape[-1])
        if _narrow_shared_heads(q, k, v, metric, w_o):
            assert metric is not None and w_o is not None
            return _shared_heads_readout(q, k, v, metric, w_o, beta, n)
        per_task = max(t[0].numel() * t.element_size() for t in (q, k, v))
        blocks = task_blocks(q.shape[0], per_task)
        if len(blocks) == 1:
            return _linear_block(q, k, v, metric, w_o, beta, n)
        parts = [
            _linear_block(q[b], k[b], v[b], _rows(metric, b), _rows(w_o, b), beta, n)
            for b in blocks
        ]
        return torch.cat(parts, dim=0)

    def _streamed(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """Stream over ``q_block × k_block`` score blocks (sizes from :func:`chunk_sizes`).

        Softmax keeps a running max ``m``, sum ``ℓ`` and numerator per query and rescales them by
        ``exp(m_old − m_new)`` at each block; ``max`` keeps a running arg-max; identity / power
        accumulate. Bilinear similarities arrive with ``M`` and β folded into the queries."""
        b, h = q.shape[0], q.shape[1] if q.ndim == 4 else 0
        if h:
            q, k, v = (t.expand(b, h, *t.shape[2:]).reshape(b * h, *t.shape[2:]) for t in (q, k, v))
        out = _streamed_3d(
            q,
            k,
            v,
            self.similarity,
            self.separation,
            scale,
            self.power,
            self.normalize,
            self.memory_budget,
        )
        return out.view(b, h, *out.shape[1:]) if h else out


def _rows(t: torch.Tensor | None, block: slice) -> torch.Tensor | None:
    """The tasks ``block`` of a per-task tensor; shared (unbatched, 2-D) tensors are kept."""
    if t is None or t.ndim < 3 or t.shape[0] == 1:
        return t
    return t[block]


def _shared_over_heads(t: torch.Tensor) -> bool:
    """A head axis whose heads all see the same tensor (one head, or a stride-0 expand)."""
    return t.ndim == 4 and (t.shape[1] == 1 or t.stride(1) == 0)


def _heads(out: torch.Tensor) -> torch.Tensor:
    """Sum a head axis ``(B, H, M, do)`` away; 3-D outputs pass through."""
    return out.sum(1) if out.ndim == 4 else out


def _linear_block(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor | None,
    w_o: torch.Tensor | None,
    beta: float,
    n: int = 1,
) -> torch.Tensor:
    state = _state(k, v, n)
    if metric is not None:
        weighted = metric @ state
        if not bool(torch.isfinite(weighted).all()):
            # features M ignores overflowed Kᵀ V (targets at 1e300 in the tokens): put M on the
            # key side instead, where its zero rows keep them out of the state
            keys = (k[:, 0] if _shared_over_heads(k) and metric.ndim < 3 else k) @ metric.mT
            if keys.ndim == 3 and v.ndim == 4:
                keys = keys.unsqueeze(1).expand(-1, v.shape[1], -1, -1)
            weighted = _state(keys, v, n)
        state = weighted
    if w_o is not None:
        state = state @ w_o
    if beta != 1.0:
        state = state * beta
    if state.ndim == 4 and _shared_over_heads(q):
        return project(q[:, 0], state.sum(1))
    if state.ndim == 4 and q.ndim == 4:
        return (q @ state).sum(1)
    return project(q, state)


def _state(k: torch.Tensor, v: torch.Tensor, n: int) -> torch.Tensor:
    """``Kᵀ V / n`` per task (and head); keys and values shared by every head, once."""
    if _shared_over_heads(k) and _shared_over_heads(v):
        state = gram(k[:, 0], v[:, 0]).unsqueeze(1)
    else:
        state = gram(k, v)
    return state / n if n != 1 else state


def _narrow_shared_heads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor | None,
    w_o: torch.Tensor | None,
) -> bool:
    """Heads that share one token stream (stride-0 head axis on Q, K and V), with per-head
    metrics and output projections that narrow the values (``do < dv``: a read-out)."""
    return (
        all(_shared_over_heads(t) for t in (q, k, v))
        and metric is not None
        and w_o is not None
        and metric.ndim == 3
        and w_o.ndim == 3
        and metric.shape[0] == w_o.shape[0] == q.shape[1]
        and w_o.shape[-1] < v.shape[-1]
    )


def _shared_heads_readout(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    metric: torch.Tensor,
    w_o: torch.Tensor,
    beta: float,
    n: int,
) -> torch.Tensor:
    """``Σ_h (Q M_h)(Kᵀ (V W_O,h)) β / n`` with the heads side by side in two GEMMs: values are
    projected first (``do < dv``), so the state is ``d × do`` per head, not ``d × dv``; the
    metric goes to the (fewer) queries. Features the metric ignores may still be huge (targets
    at 1e300 in the tokens): if the state ``Kᵀ V W_O`` overflows, the metric goes to the key side
    instead, where its zero rows keep those features out of the state."""
    b, h, m, d = q.shape
    n_keys, do = k.shape[2], w_o.shape[-1]
    u = v[:, 0] @ w_o.permute(1, 0, 2).reshape(v.shape[-1], h * do)
    z = (k[:, 0].mT @ u).view(b, d, h, do)
    if bool(torch.isfinite(z).all()):
        qm = (q[:, 0] @ metric.permute(1, 0, 2).reshape(d, h * d)).view(b, m, h, d)
        out = torch.einsum("bmhe,behk->bmk", qm, z)
    else:
        km = (k[:, 0] @ metric.mT.permute(1, 0, 2).reshape(d, h * d)).view(b, n_keys, h, d)
        z = torch.einsum("bnhe,bnhk->bhek", km, u.view(b, n_keys, h, do))
        out = torch.einsum("bme,bhek->bmk", q[:, 0], z)
    if beta != 1.0:
        out = out * beta
    return out / n if n != 1 else out


def _fused_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(scale · Q Kᵀ) V`` through ``scaled_dot_product_attention`` (queries already
    carry the metric). 3-D inputs get a head axis: with 4-D inputs PyTorch's CPU dispatcher
    picks the flash-attention kernel (it takes the O(M·N) "math" path for 3-D inputs)."""
    squeeze = q.ndim == 3
    if squeeze:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    d, dv = k.shape[-1], v.shape[-1]
    if dv < d:
        v = pad(v, (0, d - dv))
    elif dv > d:
        q, k = pad(q, (0, dv - d)), pad(k, (0, dv - d))
    if k.shape[1] != q.shape[1]:
        k, v = k.expand(-1, q.shape[1], -1, -1), v.expand(-1, q.shape[1], -1, -1)
    out = scaled_dot_product_attention(q, k, v, scale=scale)[..., :dv]
    return out.squeeze(1) if squeeze else out


def _streamed_3d(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    similarity: str,
    separation: str,
    scale: float,
    power: int,
    normalize: bool,
    memory_budget: int,
) -> torch.Tensor:
    b, m, n = q.shape[0], q.shape[1], k.shape[1]
    q_block, k_block = chunk_sizes(b, m, n, q.element_size(), memory_budget)
    bilinear = similarity in BILINEAR
    out = torch.empty(b, m, v.shape[-1], dtype=q.dtype, device=q.device)
    for qs in range(0, m, q_block):
        qc = q[:, qs : qs + q_block]
        rows = qc.shape[1]
        acc = torch.zeros(b, rows, v.shape[-1], dtype=q.dtype, device=q.device)
        total = torch.zeros(b, rows, 1, dtype=q.dtype, device=q.device)
        best = torch.full((b, rows, 1), -math.inf, dtype=q.dtype, device=q.device)
        for ks in range(0, n, k_block):
            kc, vc = k[:, ks : ks + k_block], v[:, ks : ks + k_block]
            s = qc @ kc.mT if bilinear else similarity_scores(qc, kc, similarity)
            if scale != 1.0:
                s.mul_(scale)
            if separation == "softmax":
                # the shift is a constant for autograd: softmax does not depend on it
                new_best = torch.maximum(best, s.detach().amax(-1, keepdim=True))
                rescale = (best - new_best).exp_()
                s.sub_(new_best).exp_()
                acc = torch.baddbmm(acc * rescale, s, vc)
                total = total * rescale + s.sum(-1, keepdim=True)
                best = new_best
            elif separation == "max":
                block_max, idx = s.max(-1, keepdim=True)
                better = block_max > best
                picked = torch.gather(vc, 1, idx.expand(-1, -1, vc.shape[-1]))
                acc = torch.where(better, picked, acc)
                best = torch.where(better, block_max, best)
            else:
                w = separate(s, separation, power) if separation != "identity" else s
                acc = torch.baddbmm(acc, w, vc)
                mass = w.abs() if separation == "signed_power" else w
                total = total + mass.sum(-1, keepdim=True)
        if separation == "softmax" or (normalize and separation != "max"):
            acc = acc / total
        out[:, qs : qs + rows] = acc
    return out


# ----------------------------------------------------------------------- functional form


def whitened_metric(keys: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """``M = L Lᵀ = (KᵀK + λI)⁺`` from validated keys ``(B, N, d)``: the metric of the whitened
    dot product ``q M kᵀ`` (:func:`attnreg.core.whitening.whitening_matrix`)."""
    w = whitening_matrix(keys, ridge=ridge, checked=True).matrix
    return w @ w.mT


def associate(
    queries: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike,
    *,
    similarity: str = "dot",
    separation: str = "identity",
    beta: float = 1.0,
    power: int = 2,
    metric: ArrayLike | None = None,
    ridge: float = 0.0,
    normalize: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Retrieve ``sep(β · sim(Q, K)) · V`` for ``Q (B, M, d)``, ``K (B, N, d)``, ``V (B, N, dv)``
    through one :class:`Attention` core (the functional form used by the memories).

    Unbatched 2-D inputs give a 2-D result. ``metric`` is read by ``whitened_dot`` only; without
    it the metric is ``(KᵀK + λI)⁺`` from the keys (``ridge`` = λ). With ``return_weights`` the
    ``(B, M, N)`` weights are read from the core's ``hook_weights`` (and so materialised).
    """
    core = Attention(similarity, separation, beta, power, normalize, memory_budget)
    check_nonnegative("ridge", ridge)
    q = as_tensor("queries", queries, ndim=(2, 3))
    k = as_tensor("keys", keys, ndim=(2, 3))
    v = as_tensor("values", values, ndim=(2, 3))
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(
            f"queries, keys and values must have the same rank: shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    unbatched = q.ndim == 2
    if unbatched:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0]:
        raise ValueError(f"queries {tuple(q.shape)} and keys {tuple(k.shape)} disagree on (B, d)")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} disagree on (B, N)")
    dtype = result_dtype(q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    m: torch.Tensor | None = None
    if similarity == "whitened_dot" and metric is not None:
        m = as_tensor("metric", metric, ndim=(2, 3)).to(dtype)
    elif similarity == "whitened_dot":
        m = whitened_metric(k, ridge)
    seen: dict[str, torch.Tensor] = {}
    if return_weights:
        core.hook_weights.register_forward_hook(
            lambda _mod, _inp, out: seen.__setitem__("weights", out)
        )
    out = core(q, k, v, metric=m)
    if not return_weights:
        return out[0] if unbatched else out
    weights = seen["weights"]
    return (out[0], weights[0]) if unbatched else (out, weights)
