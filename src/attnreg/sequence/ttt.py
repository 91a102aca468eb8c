"""TTT-Linear: mini-batch gradient descent on the tokens' squared errors, the gradients of a
mini-batch all taken at the map it started from (Sun et al. 2024, "Learning to (Learn at Test
Time): RNNs with Expressive Hidden States", arXiv 2407.04620; fla's ``ttt``).

The tokens fall into mini-batches of ``batch_size``. In the mini-batch that starts from the map
``W₀`` (``d_k × d_v``, from ``W = 0``; and the bias ``b₀``, from 0, with ``norm``), token ``t``
adds its gradient ``G_t = ∇ℓ_t(W₀)`` and reads out with the map the batch's gradients so far
give: ``W_t = W₀ − η_t Σ_{i≤t} G_i``, ``o_t = W_tᵀ q_t`` (TTT's dual form); the next batch
starts from ``W₀ − η_e Σ_{i in batch} G_i`` (``e`` its last token).

* ``norm=False``: ``ℓ_t(W) = ½‖Wᵀ k_t − v_t‖²``, ``G_t = k_t (W₀ᵀ k_t − v_t)ᵀ``.
* ``norm=True`` (the paper's TTT-Linear): ``ℓ_t(W, b) = ½‖LN(Wᵀ k_t + b) − (v_t − k_t)‖²`` with
  ``LN(z) = γ ⊙ (z − mean z)/√(var z + ε) + β`` (per head ``γ = norm_weight``,
  ``β = norm_bias``), the inner model ``k + LN(Wᵀ k + b)`` (a residual) fitted to ``v``; the
  gradient through the LayerNorm written out; the output ``o_t + LN(o_t)`` with
  ``o_t = W_tᵀ q_t + b_t``. Needs ``d_k = d_v``.

Two forms: :func:`ttt_recurrent`, the token loop as defined, and :func:`ttt_chunk`, the
paper's dual form, one mini-batch at a time as matrix products: with ``E`` the batch's errors
(rows ``e_i = W₀ᵀ k_i − v_i``; with ``norm`` the LayerNorm's gradients), ``O = Q W₀ −
Diag(η) tril(Q Kᵀ) E`` and ``W₀ ← W₀ − η_e Kᵀ E``; it never holds more than a
``batch_size × batch_size`` block of scores.

Regression: **mini-batch gradient descent** (step ``η_t``) over linear maps (``norm``: over
``k ↦ k + LN(Wᵀ k + b)``) on the squared error of the pairs seen so far, one step per
mini-batch. ``batch_size=1`` without ``norm`` is the delta rule with ``β = η``.
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike, as_tensor, check_flag, check_positive
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.inputs import check_qkv, check_scale, choose_mode, per_token

FORMS = ("chunk", "recurrent")
"""This layer's forms: ``mode="auto"`` picks the dual form (``chunk``) everywhere."""


def ttt_linear(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    lr: float | ArrayLike,
    *,
    batch_size: int = 16,
    scale: float = 1.0,
    norm: bool = False,
    norm_weight: ArrayLike | None = None,
    norm_bias: ArrayLike | None = None,
    eps: float = 1e-6,
    mode: str = "auto",
) -> torch.Tensor:
    """TTT-Linear (module docstring): ``q, k (B, H, T, d_k)``, ``v (B, H, T, d_v)`` →
    ``o (B, H, T, d_v)``. ``lr`` ``η_t ≥ 0``: a number, ``(H,)`` or ``(B, H, T)``.
    ``batch_size``: tokens per mini-batch (a positive int; ``T`` need not be a multiple: the last
    batch is shorter). With ``norm``: ``norm_weight`` and ``norm_bias`` ``(H, d)`` (default ones
    and zeros) and ``eps > 0``. ``mode``: ``"auto"`` or ``"chunk"`` (the dual form,
    :func:`ttt_chunk`) or ``"recurrent"`` (the token loop, :func:`ttt_recurrent`)."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    eta = per_token("lr", lr, kt, low=0.0)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")
    check_flag("norm", norm)
    affine = _norm_parameters(norm, norm_weight, norm_bias, check_positive("eps", eps), kt, vt)

    compute = ttt_chunk if form == "chunk" else ttt_recurrent

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        return compute(qc * sc, kc, vc, eta, batch_size, affine), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "ttt_linear")


Affine = tuple[torch.Tensor, torch.Tensor, float] | None
"""TTT's LayerNorm: ``(γ, β, ε)`` with ``γ, β (H, d)``; ``None`` without ``norm``."""


def _norm_parameters(
    norm: bool,
    weight: ArrayLike | None,
    bias: ArrayLike | None,
    eps: float,
    k: torch.Tensor,
    v: torch.Tensor,
) -> Affine:
    """The LayerNorm's parameters checked against the inputs (``None`` without ``norm``)."""
    if not norm:
        if weight is not None or bias is not None:
            raise ValueError("norm_weight, norm_bias: given without norm=True")
        return None
    h, d = k.shape[1], k.shape[-1]
    if v.shape[-1] != d:
        raise ValueError(
            f"norm: TTT's residual target v − k needs d_v = d_k, got d_k = {d}, d_v = {v.shape[-1]}"
        )
    out = []
    for name, value, default in (("norm_weight", weight, 1.0), ("norm_bias", bias, 0.0)):
        tensor = k.new_full((h, d), default) if value is None else as_tensor(name, value, ndim=(2,))
        if tuple(tensor.shape) != (h, d):
            raise ValueError(
                f"{name}: must have shape (H, d) = {(h, d)}, got {tuple(tensor.shape)}"
            )
        out.append(tensor.to(k.dtype))
    return out[0], out[1], eps


def ttt_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lr: torch.Tensor,
    batch_size: int,
    affine: Affine,
) -> torch.Tensor:
    """The update as it is defined, token by token: the gradients of a mini-batch at its
    starting map, each token's read-out with the batch's gradients so far (``lr (B, H, T)``)."""
    b_, h, t_len, d_k = k.shape
    w0 = k.new_zeros(b_, h, d_k, v.shape[-1])
    c0 = k.new_zeros(b_, h, v.shape[-1])
    outs = []
    for start in range(0, t_len, batch_size):
        grad_w, grad_c = torch.zeros_like(w0), torch.zeros_like(c0)
        for t in range(start, min(start + batch_size, t_len)):
            key = k[:, :, t]
            z = torch.einsum("bhk,bhkv->bhv", key, w0)
            if affine is None:
                g = z - v[:, :, t]
            else:
                g = _layer_norm_gradient(z + c0, v[:, :, t] - key, affine)
                grad_c = grad_c + g
            grad_w = grad_w + key[..., None] * g[:, :, None]
            eta = lr[:, :, t, None]
            o = torch.einsum("bhk,bhkv->bhv", q[:, :, t], w0 - eta[..., None] * grad_w)
            if affine is not None:
                o = o + c0 - eta * grad_c
                o = o + _layer_norm(o, affine)
            outs.append(o)
        eta_last = lr[:, :, t, None]
        w0 = w0 - eta_last[..., None] * grad_w
        c0 = c0 - eta_last * grad_c
    return torch.stack(outs, dim=2)


def ttt_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lr: torch.Tensor,
    batch_size: int,
    affine: Affine,
) -> torch.Tensor:
    """The dual form (Sun et al. 2024, §2.7), one mini-batch of ``n ≤ batch_size`` tokens at a
    time from its starting map ``W₀`` (and bias ``c₀``): errors ``E = K W₀ − V`` (with ``norm``
    the LayerNorm's gradients at ``K W₀ + c₀`` against ``V − K``), read-outs
    ``O = Q W₀ − Diag(η) tril(Q Kᵀ) E`` (with ``norm`` ``+ c₀ − Diag(η) cumsum(E)``, then
    ``O + LN(O)``), next map ``W₀ − η_last Kᵀ E`` (``lr (B, H, T)``)."""
    b_, h, t_len, d_k = k.shape
    w0 = k.new_zeros(b_, h, d_k, v.shape[-1])
    c0 = k.new_zeros(b_, h, 1, v.shape[-1])
    if affine is not None:  # γ, β (H, d) → (H, 1, d): one per head, for every row of a batch
        affine = (affine[0][:, None], affine[1][:, None], affine[2])
    outs = []
    for start in range(0, t_len, batch_size):
        stop = min(start + batch_size, t_len)
        qb, kb, vb = q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop]
        eta = lr[:, :, start:stop, None]
        z = kb @ w0
        if affine is None:
            errors = z - vb
        else:
            errors = _layer_norm_gradient(z + c0, vb - kb, affine)
        scores = torch.tril(qb @ kb.mT)
        out = qb @ w0 - eta * (scores @ errors)
        if affine is not None:
            out = out + c0 - eta * errors.cumsum(-2)
            out = out + _layer_norm(out, affine)
        outs.append(out)
        eta_last = lr[:, :, stop - 1, None, None]
        w0 = w0 - eta_last * (kb.mT @ errors)
        if affine is not None:
            c0 = c0 - eta_last * errors.sum(-2, keepdim=True)
    return torch.cat(outs, dim=2)


def _layer_norm(z: torch.Tensor, affine: tuple[torch.Tensor, torch.Tensor, float]) -> torch.Tensor:
    """``γ ⊙ (z − mean z)/√(var z + ε) + β`` over the last axis (``z (B, H, d)``, or
    ``(B, H, n, d)`` with ``γ, β (H, 1, d)``)."""
    weight, bias, eps = affine
    centred = z - z.mean(-1, keepdim=True)
    return weight * centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) + bias


def _layer_norm_gradient(
    z: torch.Tensor, target: torch.Tensor, affine: tuple[torch.Tensor, torch.Tensor, float]
) -> torch.Tensor:
    """``∂/∂z ½‖LN(z) − target‖²`` (``z``, ``target`` ``(B, H, d)``, or ``(B, H, n, d)`` with
    ``γ, β (H, 1, d)``): with ``x̂`` the
    normalised ``z``, ``σ = √(var z + ε)`` and ``g = γ ⊙ (LN(z) − target)``, the LayerNorm's
    backward ``(d g − Σ g − x̂ Σ(g ⊙ x̂)) / (d σ)``."""
    weight, bias, eps = affine
    d = z.shape[-1]
    centred = z - z.mean(-1, keepdim=True)
    sigma = torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    unit = centred / sigma
    g = weight * (weight * unit + bias - target)
    total = g.sum(-1, keepdim=True)
    along = (g * unit).sum(-1, keepdim=True)
    return (d * g - total - unit * along) / (d * sigma)
