"""LaMBO-2's static training settings (:class:`TrainConfig`), below both the data tables
(``lambo2.data``: the split and the minibatches read it) and the training steps
(``lambo2.train``), so that neither imports the other's types."""

from __future__ import annotations

import dataclasses

__all__ = ["TrainConfig"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Static training settings (defaults = the port's recommended defaults, docs/design/lambo2_port.md).

    Attributes:
      epochs: ``E`` epochs per fit (paper 100; bbo-bench 16); the same for the initial fit and
        every retrain.
      batch_size: minibatch size of every leaf (128).
      learning_rate, b1, b2, eps: Adam (5e-3, 0.9, 0.99, 1e-8); no weight decay, no clipping.
      warmup_epochs: linear warm-up units of the per-epoch cosine schedule (2).
      train_fraction: fraction of each task's table used for training (cortex keeps a fixed-seed
        80 %); ``None`` or 1.0 uses everything.
      split_seed: seed of that split (cortex: 0xDEADBEEF).
      num_timesteps: corruption steps ``T`` (1000).
      nominal_label_var: ``s0^2`` of the regressor's moment matching (0.01).
      fused: ``False`` (default, cortex): :func:`train_step`, ``2 E_ens + 1`` sequential leaf
        updates of the shared encoder. ``True``: :func:`fused_train_step`, one Adam step on the
        sum of the leaves' losses at the step's starting parameters (simultaneous updates; a
        different algorithm, see ``docs/design/lambo2_port.md`` decision 15).
    """

    epochs: int = 100
    batch_size: int = 128
    learning_rate: float = 5e-3
    b1: float = 0.9
    b2: float = 0.99
    eps: float = 1e-8
    warmup_epochs: int = 2
    train_fraction: float | None = 0.8
    split_seed: int = 0xDEADBEEF
    num_timesteps: int = 1000
    nominal_label_var: float = 0.01
    fused: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.fused, bool):
            raise ValueError(f"TrainConfig.fused must be a bool, got {self.fused!r}.")
        for name in ("epochs", "batch_size", "num_timesteps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}.")
        if self.train_fraction is not None and not 0.0 < self.train_fraction <= 1.0:
            raise ValueError(f"train_fraction must lie in (0, 1], got {self.train_fraction!r}.")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}.")
