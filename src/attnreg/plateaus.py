"""Loss plateaus in a training curve (:func:`find_plateaus`) and the warning
:func:`attnreg.training.train` gives when a run ends stuck on one (:class:`PlateauWarning`)."""

from __future__ import annotations

from dataclasses import dataclass


class PlateauWarning(UserWarning):
    """A training run ended on a loss plateau (see :class:`attnreg.training_config.TrainResult`)."""


@dataclass
class Plateau:
    """Steps ``[start, end)`` over which the training loss stayed at about ``loss``."""

    start: int
    end: int
    loss: float
    escaped: bool = True

    def describe(self) -> str:
        return f"steps {self.start}-{self.end} at loss {self.loss:.4g}"


def find_plateaus(
    losses: list[float],
    window: int,
    rtol: float,
    reference_loss: float | None = None,
    drop: float = 0.1,
) -> list[Plateau]:
    """Loss plateaus in a training curve.

    Split ``losses`` into windows of ``window`` steps; a *flat stretch* is a maximal run of
    consecutive windows whose mean loss fell by less than ``rtol`` (relative). It is reported as

    * an escaped plateau if the loss later falls at least ``drop`` (relative) below its level;
    * a stuck plateau if it lasts to the end of the run and its level is above
      ``(1 + rtol) × reference_loss`` (or, without a reference, within ``drop`` of the initial
      loss: nothing was learned).

    Other flat stretches (convergence, slow progress) are not plateaus.
    """
    n_windows = len(losses) // window
    if n_windows < 2:
        return []
    means = [sum(losses[i * window : (i + 1) * window]) / window for i in range(n_windows)]
    flat = [(means[i] - means[i + 1]) < rtol * abs(means[i]) for i in range(n_windows - 1)]
    plateaus: list[Plateau] = []
    i = 0
    while i < len(flat):
        if not flat[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(flat) and flat[j + 1]:
            j += 1
        level = means[j + 1]
        later = min(means[j + 1 :])
        at_end = j + 1 == n_windows - 1
        if later <= (1 - drop) * level:
            plateaus.append(Plateau(i * window, (j + 2) * window, level, escaped=True))
        elif at_end:
            if reference_loss is not None:
                stuck = level > (1 + rtol) * reference_loss
            else:
                stuck = level >= (1 - drop) * losses[0]
            if stuck:
                plateaus.append(Plateau(i * window, (j + 2) * window, level, escaped=False))
        i = j + 1
    return plateaus
