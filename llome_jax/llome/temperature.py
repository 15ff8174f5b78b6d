"""Sampling-temperature schedule of iterative refinement.

Paper, App. "Iterative Refinement": the default grid is ``T = [0.6, 0.8, 1.0, 1.2, 1.4, 1.6]``;
"if the average Hamming distance of generations from the last LLOME round was < 0.075, then we
instead use T + 0.6. For average Hamming distance between 0.075 and 0.1, we use T + 0.4. For
averages between 0.1 and 0.1 [sic], we use T + 0.2". The authors' code (``get_temperatures``)
fixes the typo: the third threshold is 0.15, every comparison is strict (``hd < t``),
and ``hd`` is the mean fractional Hamming distance of every valid generated sequence to its input,
over all decoding jobs of the previous round, before deduplication.

When ``hd`` is unknown (first round) or NaN (no valid generation) the offset is 0. The reference
also forgets ``hd`` at the start of each training phase (SFT -> MargE/DPO) so that the first round
of a phase uses the default grid; the paper adjusts after every round. That choice belongs to the
loop (pass ``None`` to reset).
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["DEFAULT_TEMPERATURES", "TemperatureSchedule", "temperature_offset", "temperatures"]

#: The paper's temperature grid ``T`` (Alg. IterativeRefinement).
DEFAULT_TEMPERATURES: tuple[float, ...] = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6)


@dataclasses.dataclass(frozen=True)
class TemperatureSchedule:
    """Hamming-distance-driven temperature offsets (static, hashable).

    Attributes:
      base: the temperature grid ``T`` (all ``> 0``).
      thresholds: increasing mean-Hamming thresholds; ``hd < thresholds[i]`` (first match) gives
        ``offsets[i]``.
      offsets: the offsets added to every temperature of ``base``.
      adaptive: ``False`` always uses ``base`` (the reference's ``temperature_scaling=False``).
    """

    base: tuple[float, ...] = DEFAULT_TEMPERATURES
    thresholds: tuple[float, ...] = (0.075, 0.1, 0.15)
    offsets: tuple[float, ...] = (0.6, 0.4, 0.2)
    adaptive: bool = True

    def __post_init__(self) -> None:
        if not self.base or any(not t > 0 for t in self.base):
            raise ValueError(
                f"base temperatures must be a non-empty tuple of values > 0; got {self.base}."
            )
        if len(self.thresholds) != len(self.offsets):
            raise ValueError(
                f"thresholds and offsets must pair up; got {len(self.thresholds)} and {len(self.offsets)}."
            )
        if any(b <= a for a, b in zip(self.thresholds, self.thresholds[1:])):
            raise ValueError(f"thresholds must be strictly increasing; got {self.thresholds}.")
        if any(min(self.base) + o <= 0 for o in self.offsets):
            raise ValueError("every offset must keep all temperatures > 0.")


def temperature_offset(
    mean_hamming: float | None, schedule: TemperatureSchedule = TemperatureSchedule()
) -> float:
    """Offset added to the temperature grid, from the previous round's mean Hamming distance.

    Args:
      mean_hamming: mean fractional Hamming distance of the previous round's valid generations
        to their inputs; ``None`` (no previous round / phase reset) or NaN give 0.
      schedule: :class:`TemperatureSchedule`.

    Returns:
      ``0.6`` if ``hd < 0.075``, ``0.4`` if ``hd < 0.1``, ``0.2`` if ``hd < 0.15``, else ``0.0``
      (with the default schedule).

    Example:
      >>> [temperature_offset(h) for h in (None, 0.05, 0.075, 0.099, 0.1, 0.149, 0.15, 0.3)]
      [0.0, 0.6, 0.4, 0.4, 0.2, 0.2, 0.0, 0.0]
    """
    if not schedule.adaptive or mean_hamming is None:
        return 0.0
    hd = float(mean_hamming)
    if math.isnan(hd):
        return 0.0
    for threshold, offset in zip(schedule.thresholds, schedule.offsets):
        if hd < threshold:
            return float(offset)
    return 0.0


def temperatures(
    offset: float = 0.0, schedule: TemperatureSchedule = TemperatureSchedule()
) -> tuple[float, ...]:
    """The grid ``T + offset``, rounded to 6 decimals (``0.8 + 0.4`` is ``1.2``, not ``1.2000000000000002``).

    Example:
      >>> temperatures(0.6)
      (1.2, 1.4, 1.6, 1.8, 2.0, 2.2)
    """
    return tuple(round(t + offset, 6) for t in schedule.base)
