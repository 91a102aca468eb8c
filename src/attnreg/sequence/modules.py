"""``nn.Module`` forms of the sequence layers, with hook points on the state and the read-out.

Each module computes its layer function of :mod:`attnreg.sequence` (same contract, same
numbers); it holds no projections: ``q, k, v`` and the per-token parameters are its inputs.
Hook points (TransformerLens style): ``hook_q``, ``hook_k``, ``hook_v`` (the inputs, before the
query scale), the layer's state, and ``hook_output``. A hook on a state makes the module take the
explicit path: the token-by-token recurrence keeps every state (``(B, H, T, d_k, d_v)``: memory
``T · d_k · d_v`` per head), the hook reads or replaces them, and the read-out is computed from
what the hook returns (:func:`state_path`; a module built with ``mode="fused"`` or ``"chunk"``
refuses a state hook rather than ignore its mode). ``run_with_cache(q, k, v, …)`` and
``run_with_hooks`` call ``forward``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnreg.core import Hooked, HookPoint
from attnreg.core.hooks import HookFn
from attnreg.core.results import check_finite_result
from attnreg.core.validation import ArrayLike, check_flag, check_positive
from attnreg.sequence.delta_rule import delta_recurrent, delta_rule
from attnreg.sequence.inputs import (
    check_lam,
    check_lam_values,
    check_mode,
    check_qkv,
    check_scale,
    decay_of,
    per_token,
)
from attnreg.sequence.linear_attention import linear_attention, linear_recurrent, normalized
from attnreg.sequence.local_linear import local_linear, local_linear_attention
from attnreg.sequence.longhorn import diagonal_longhorn_recurrent, longhorn, longhorn_terms
from attnreg.sequence.mesa import mesa, mesa_recurrent, ridge_readout
from attnreg.sequence.softmax import causal_weights, softmax_attention


def state_readout(states: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``o_t = S_tᵀ q_t`` for stacked states ``(B, H, T, d_k, d_v)`` and ``q (B, H, T, d_k)``."""
    return torch.einsum("bhtkv,bhtk->bhtv", states, q)


def state_path(mode: str, hooked: bool) -> bool:
    """Whether a module takes its explicit state path: ``True`` when a hook is registered on a
    state (the token-by-token recurrence keeps every state for it), ``False`` for the layer
    function in ``mode``. A state hook with ``mode`` ``"fused"`` or ``"chunk"`` is a
    ``ValueError`` naming ``mode``: those forms never hold the per-token states a hook reads."""
    if hooked and mode in ("fused", "chunk"):
        raise ValueError(
            f"mode: {mode!r} never holds the per-token states a state hook reads; a hooked "
            "module runs the token-by-token recurrence (mode 'auto' or 'recurrent')"
        )
    return hooked


class SequenceLayer(Hooked):
    """Base: ``hook_q``, ``hook_k``, ``hook_v``, ``hook_output``; the runners call ``forward``."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = check_scale(scale)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_output = HookPoint()

    def inputs(
        self, q: ArrayLike, k: ArrayLike, v: ArrayLike
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Validated ``q, k, v`` after their hook points."""
        qt, kt, vt = check_qkv(q, k, v)
        return self.hook_q(qt), self.hook_k(kt), self.hook_v(vt)

    def run_with_cache(
        self,
        *args: Any,
        names: Sequence[str] | None = None,
        method: str = "forward",
        **kwargs: Any,
    ) -> tuple[Any, dict[str, torch.Tensor]]:
        """:meth:`Hooked.run_with_cache`, calling ``forward`` by default."""
        return super().run_with_cache(*args, names=names, method=method, **kwargs)

    def run_with_hooks(
        self,
        *args: Any,
        hooks: Sequence[tuple[str, HookFn]],
        method: str = "forward",
        **kwargs: Any,
    ) -> Any:
        """:meth:`Hooked.run_with_hooks`, calling ``forward`` by default."""
        return super().run_with_hooks(*args, hooks=hooks, method=method, **kwargs)


class LinearAttentionLayer(SequenceLayer):
    """:func:`attnreg.sequence.linear_attention` as a module. ``hook_state``: every ``S_t``
    (``(B, H, T, d_k, d_v)``); with ``normalize``, ``hook_normalizer``: every ``z_t``
    (``(B, H, T, d_k)``)."""

    def __init__(self, normalize: bool = False, scale: float = 1.0, mode: str = "auto") -> None:
        super().__init__(scale)
        self.normalize = check_flag("normalize", normalize)
        self.mode = check_mode(mode)
        self.hook_state, self.hook_normalizer = HookPoint(), HookPoint()

    def forward(
        self, q: ArrayLike, k: ArrayLike, v: ArrayLike, decay: float | ArrayLike | None = None
    ) -> torch.Tensor:
        """``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v) -> (B, H, T, d_v)``."""
        qt, kt, vt = self.inputs(q, k, v)
        if not state_path(self.mode, self.hook_state.active or self.hook_normalizer.active):
            out = linear_attention(
                qt, kt, vt, decay=decay, normalize=self.normalize, scale=self.scale, mode=self.mode
            )
            return self.hook_output(out)
        d_v = vt.shape[-1]
        if self.normalize:
            vt = torch.cat([vt, torch.ones_like(vt[..., :1])], dim=-1)
        _, states = linear_recurrent(qt, kt, vt, decay_of(decay, kt, channels=True), states=True)
        assert states is not None
        qs = qt * self.scale
        out = state_readout(self.hook_state(states[..., :d_v]), qs)
        if self.normalize:
            z = self.hook_normalizer(states[..., d_v])
            out = normalized(out, (z * qs).sum(-1, keepdim=True))
        return self.hook_output(check_finite_result(out, "linear_attention"))


class DeltaRuleLayer(SequenceLayer):
    """:func:`attnreg.sequence.delta_rule` (DeltaNet; Gated DeltaNet with ``decay``) as a
    module. ``hook_state``: every ``S_t`` (``(B, H, T, d_k, d_v)``)."""

    def __init__(self, scale: float = 1.0, mode: str = "auto") -> None:
        super().__init__(scale)
        self.mode = check_mode(mode)
        self.hook_state = HookPoint()

    def forward(
        self,
        q: ArrayLike,
        k: ArrayLike,
        v: ArrayLike,
        beta: float | ArrayLike,
        decay: float | ArrayLike | None = None,
    ) -> torch.Tensor:
        """``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v), β -> (B, H, T, d_v)``."""
        qt, kt, vt = self.inputs(q, k, v)
        if not state_path(self.mode, self.hook_state.active):
            out = delta_rule(qt, kt, vt, beta, decay=decay, scale=self.scale, mode=self.mode)
            return self.hook_output(out)
        b = per_token("beta", beta, kt, low=0.0)
        _, states = delta_recurrent(qt, kt, vt, b, decay_of(decay, kt, channels=True), states=True)
        assert states is not None
        out = state_readout(self.hook_state(states), qt * self.scale)
        return self.hook_output(check_finite_result(out, "delta_rule"))


class LonghornLayer(SequenceLayer):
    """:func:`attnreg.sequence.longhorn` as a module. ``hook_state``: every ``S_t``."""

    def __init__(self, scale: float = 1.0, diagonal: bool = False, mode: str = "auto") -> None:
        super().__init__(scale)
        self.diagonal = check_flag("diagonal", diagonal)
        self.mode = check_mode(mode)
        self.hook_state = HookPoint()

    def forward(
        self, q: ArrayLike, k: ArrayLike, v: ArrayLike, beta: float | ArrayLike
    ) -> torch.Tensor:
        """``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v), β -> (B, H, T, d_v)``."""
        qt, kt, vt = self.inputs(q, k, v)
        if not state_path(self.mode, self.hook_state.active):
            out = longhorn(
                qt, kt, vt, beta, scale=self.scale, diagonal=self.diagonal, mode=self.mode
            )
            return self.hook_output(out)
        keys, step, values = longhorn_terms(per_token("beta", beta, kt, low=0.0), kt, vt)
        if self.diagonal:
            _, states = diagonal_longhorn_recurrent(qt, keys, values, step, states=True)
        else:
            _, states = delta_recurrent(qt, keys, values, step, None, states=True)
        assert states is not None
        out = state_readout(self.hook_state(states), qt * self.scale)
        return self.hook_output(check_finite_result(out, "longhorn"))


class MesaNetLayer(SequenceLayer):
    """:func:`attnreg.sequence.mesa` as a module (``lam``: a number or ``(H, d_k)``, fixed at
    construction). ``hook_kk``: every ``H^{kk}_t`` (``(B, H, T, d_k, d_k)``); ``hook_kv``: every
    ``H^{kv}_t`` (``(B, H, T, d_k, d_v)``)."""

    def __init__(
        self, lam: float | ArrayLike = 1.0, scale: float = 1.0, mode: str = "auto"
    ) -> None:
        super().__init__(scale)
        check_lam_values(lam)  # a bad λ is refused here, not at the first forward pass
        self.lam = lam
        self.mode = check_mode(mode)
        self.hook_kk, self.hook_kv = HookPoint(), HookPoint()

    def forward(
        self,
        q: ArrayLike,
        k: ArrayLike,
        v: ArrayLike,
        beta: float | ArrayLike,
        decay: float | ArrayLike | None = None,
    ) -> torch.Tensor:
        """``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v), β -> (B, H, T, d_v)``."""
        qt, kt, vt = self.inputs(q, k, v)
        if not state_path(self.mode, self.hook_kk.active or self.hook_kv.active):
            out = mesa(
                qt, kt, vt, beta, decay=decay, lam=self.lam, scale=self.scale, mode=self.mode
            )
            return self.hook_output(out)
        lam = check_lam(self.lam, kt)
        b = per_token("beta", beta, kt, low=0.0)
        _, moments = mesa_recurrent(qt, kt, vt, b, decay_of(decay, kt), lam, states=True)
        assert moments is not None
        kk, kv = self.hook_kk(moments[0]), self.hook_kv(moments[1])
        reg = torch.diag_embed(lam)[:, None]  # (H, 1, d_k, d_k) against (B, H, T, d_k, d_k)
        out = ridge_readout(kk, kv, qt * self.scale, reg)
        return self.hook_output(check_finite_result(out, "mesa"))


class SoftmaxAttentionLayer(SequenceLayer):
    """:func:`attnreg.sequence.softmax_attention` as a module. ``hook_weights``: the causal
    softmax weights ``w_{t,i}`` (``(B, H, T, T)``, held whole only when hooked)."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__(scale)
        self.hook_weights = HookPoint()

    def forward(self, q: ArrayLike, k: ArrayLike, v: ArrayLike) -> torch.Tensor:
        """``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v) -> (B, H, T, d_v)``."""
        qt, kt, vt = self.inputs(q, k, v)
        if not self.hook_weights.active:
            return self.hook_output(softmax_attention(qt, kt, vt, scale=self.scale))
        weights = self.hook_weights(causal_weights(qt, kt, self.scale))
        return self.hook_output(check_finite_result(weights @ vt, "softmax_attention"))


class LocalLinearAttentionLayer(SequenceLayer):
    """:func:`attnreg.sequence.local_linear_attention` as a module. ``hook_weights``: the
    kernel weights ``w_{t,i}`` of the local fits (``(B, H, T, T)``, held whole only when
    hooked)."""

    def __init__(self, lam: float = 1.0, scale: float = 1.0) -> None:
        super().__init__(scale)
        self.lam = check_positive("lam", lam)
        self.hook_weights = HookPoint()

    def forward(self, q: ArrayLike, k: ArrayLike, v: ArrayLike) -> torch.Tensor:
        """``(B, H, T, d_k), (B, H, T, d_k), (B, H, T, d_v) -> (B, H, T, d_v)``."""
        qt, kt, vt = self.inputs(q, k, v)
        if not self.hook_weights.active:
            out = local_linear_attention(qt, kt, vt, lam=self.lam, scale=self.scale)
            return self.hook_output(out)
        weights = self.hook_weights(causal_weights(qt, kt, self.scale))
        out = local_linear(qt, kt, vt, self.lam, self.scale, weights)
        return self.hook_output(check_finite_result(out, "local_linear_attention"))
