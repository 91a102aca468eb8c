"""The generalized (diagonal-plus-low-rank) delta rule behind RWKV-7 (Peng et al. 2025, "RWKV-7
'Goose' with Expressive Dynamic State Evolution", arXiv 2503.14456; fla's
``generalized_delta_rule``, ``dplr_recurrence``).

``S_t = (Diag(α_t) + a_t b_tᵀ) S_{t−1} + k_t v_tᵀ``, ``o_t = S_tᵀ q_t`` (``S_0 = 0``), with
``a_t, b_t ∈ R^{d_k}`` free; ``b_tᵀ S_{t−1}`` reads the state before the decay. DeltaNet is the
case ``a_t = −β_t k_t``, ``b_t = k_t`` with the values ``β_t v_t`` (Gated DeltaNet, whose erase
acts on the decayed state, ``a_t = −α_t β_t k_t``); RWKV-7 the case ``a_t = −κ̂_t ⊙ â_t``,
``b_t = κ̂_t`` (the normalised removal key and the in-context learning rate).

Regression (attnreg's reading, not the paper's words): with ``W = Sᵀ`` the update is
``W_t = W_{t−1} Diag(α_t) + (W_{t−1} b_t) a_tᵀ + v_t k_tᵀ``. For ``a_t = −η_t ⊙ b_t`` the middle
term is the gradient step with per-coordinate rate ``η_t`` on ``½‖W b_t‖²`` (erasing what the
map stores along ``b_t``) and the last writes the pair ``(k_t, v_t)``: with ``k_t = η_t ⊙ b_t``
the two together are one preconditioned LMS step on ``½‖W b_t − v_t‖²`` after a
per-coordinate weight decay — online least squares whose erase and write keys may differ.

Forms: :func:`generalized_delta_recurrent` (the token loop) and the fused CPU recurrence
(:mod:`~attnreg.sequence.fused_generalized`).
"""

from __future__ import annotations

import torch

from attnreg.core.validation import ArrayLike
from attnreg.sequence.checked import Result, checked_result
from attnreg.sequence.fused_generalized import fused_generalized
from attnreg.sequence.inputs import check_qkv, check_scale, choose_mode, decay_of, key_shaped
from attnreg.sequence.tiling import decayed

FORMS = ("fused", "recurrent")
"""This layer's forms: ``mode="auto"`` picks the fused kernel on the CPU and the token loop
elsewhere (no chunked form yet)."""


def generalized_delta_rule(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    *,
    decay: float | ArrayLike | None = None,
    scale: float = 1.0,
    mode: str = "auto",
) -> torch.Tensor:
    """The generalized delta rule (module docstring): ``q, k (B, H, T, d_k)``,
    ``v (B, H, T, d_v)``, ``a, b (B, H, T, d_k)`` → ``o (B, H, T, d_v)``.

    ``decay`` ``α_t ∈ (0, 1]``: a number, ``(H,)``, ``(B, H, T)`` or one per key channel
    ``(B, H, T, d_k)`` (RWKV-7's ``w``). ``a`` and ``b`` are any finite vectors: the transition
    ``Diag(α_t) + a_t b_tᵀ`` can expand (RWKV-7 keeps its eigenvalues in ``[−1, 1]`` by its
    choice of ``a`` and ``b``). ``mode``: ``"auto"``, ``"fused"`` or ``"recurrent"`` (no
    chunked form yet)."""
    qt, kt, vt = check_qkv(q, k, v)
    form = choose_mode(mode, kt, forms=FORMS)
    at = key_shaped("a", a, kt)
    bt = key_shaped("b", b, kt)
    alpha = decay_of(decay, kt, channels=True)

    def layer(qc: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, sc: float) -> Result:
        if form == "fused":
            return fused_generalized((qc, kc, vc, at, bt), alpha, sc)
        return generalized_delta_recurrent(qc * sc, kc, vc, at, bt, alpha), None

    return checked_result(layer, qt, kt, vt, check_scale(scale), "generalized_delta_rule")


def generalized_delta_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    decay: torch.Tensor | None,
) -> torch.Tensor:
    """The recurrence as it is defined, one token at a time: ``S ← Diag(α_t) S + a_t (b_tᵀ S)
    + k_t v_tᵀ`` (``b_tᵀ S`` from the state before the token), ``o_t = Sᵀ q_t``."""
    b_, h, t_len, d_k = k.shape
    s = k.new_zeros(b_, h, d_k, v.shape[-1])
    outs = []
    for t in range(t_len):
        read = torch.einsum("bhk,bhkv->bhv", b[:, :, t], s)
        s = decayed(s, decay, t)
        s = s + a[:, :, t, :, None] * read[:, :, None] + k[:, :, t, :, None] * v[:, :, t, None]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], s))
    return torch.stack(outs, dim=2)
