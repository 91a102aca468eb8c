"""Hook points: named places on an attention core's forward pass where tensors are read or edited.

TransformerLens style (Nanda et al. 2022): a :class:`HookPoint` is an identity module; PyTorch
forward hooks registered on it see the tensor that flows through. :class:`Hooked` gives any
module holding attention cores ``run_with_cache`` (read every hook point) and ``run_with_hooks``
(edit). The core (:class:`attnreg.core.attention.Attention`) places ``hook_q``, ``hook_k``,
``hook_v``, ``hook_scores``, ``hook_weights`` and ``hook_output``; which of them change its path
is said there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

HookFn = Callable[[torch.Tensor, str], torch.Tensor | None]


class HookPoint(nn.Module):
    """An identity on the forward path. Forward hooks registered on it read the tensor that
    flows through (``run_with_cache``) or replace it (``run_with_hooks``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @property
    def active(self) -> bool:
        """Whether any hook is registered here."""
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
