"""The half of a round-driver plug-in that every optimizer shares (:class:`RoundOptimizerBase`).

:class:`llome_jax.run.runner.RoundOptimizer` is the protocol the round driver runs; an optimizer's
own algorithm is its ``init`` (round 0), ``round``, ``save``/``restore``, ``round_index``,
``stop_reason`` and log lines. What is the same for the GA, LLOME and LaMBO-2 lives here once, as
evosax's base class holds the machinery its strategies share: the run seed, the objective
(checked, or the Ehrlich function ``cfg.function``), the run's :class:`~llome_jax.oracle.Oracle`,
``config.json``'s configuration (with its ``config_version``), the migrations of older ones
(:mod:`llome_jax.run.migrations`), the number of rounds and ``regret.png``.

A plug-in subclasses it, sets ``name`` and ``migrations``, calls ``super().__init__(cfg,
objective, custom_objective=...)`` with the objective it checked (:meth:`checked_objective`),
and implements the rest of the protocol.
"""

from __future__ import annotations

from typing import Any, ClassVar

from llome_jax.objective import Objective, ehrlich_objective, objective_config
from llome_jax.oracle import Oracle
from llome_jax.run.migrations import CONFIG_VERSION, Migration, migrate
from llome_jax.run.plotting import plot_options, plot_run

__all__ = ["RoundOptimizerBase"]


class RoundOptimizerBase:
    """Shared state and methods of a :class:`~llome_jax.run.runner.RoundOptimizer`.

    Attributes:
      name: ``config.json``'s ``"optimizer"`` (class attribute).
      migrations: the optimizer's ordered migrations of an older ``config.json`` (class
        attribute; :mod:`llome_jax.run.migrations`); their number is the configuration's version.
      cfg: the configuration (a frozen dataclass with ``seed``, ``rounds``, ``accounting``,
        ``constraint_queries``, ``function`` and ``to_dict()``).
      seed: the run seed (``cfg.seed``): round 0 gets ``jax.random.key(seed)``.
      objective: what is maximised (an :class:`~llome_jax.objective.Objective`).
      custom_objective: whether it was given instead of resolved from ``cfg.function``.
      oracle: the run's :class:`~llome_jax.oracle.Oracle` (the driver restores it on resume).
    """

    name: ClassVar[str] = ""
    migrations: ClassVar[tuple[Migration, ...]] = ()

    def __init__(self, cfg: Any, objective: Objective, *, custom_objective: bool) -> None:
        self.cfg = cfg
        self.seed = cfg.seed
        self.objective = objective
        self.custom_objective = custom_objective
        self.oracle = Oracle(objective, cfg.accounting, cfg.constraint_queries)

    @staticmethod
    def require_objective(objective: Any) -> None:
        """Refuse anything but an :class:`~llome_jax.objective.Objective` (or ``None``).

        Raises:
          ValueError: naming the type given.
        """
        if objective is not None and not isinstance(objective, Objective):
            raise ValueError(f"objective must be a llome_jax.Objective; got {type(objective)}.")

    @classmethod
    def checked_objective(
        cls, cfg: Any, objective: Objective | None, *, check_ehrlich: bool = False
    ) -> Objective:
        """``objective`` after one checked call (:meth:`Objective.validate`; an Ehrlich one only
        with ``check_ehrlich``), or without one the Ehrlich function of ``cfg.function`` /
        ``cfg.instance_seed``.

        Raises:
          ValueError: not an Objective, a malformed objective, or an unknown function.
        """
        if objective is None:
            return ehrlich_objective(cfg.function, cfg.instance_seed)
        cls.require_objective(objective)
        if check_ehrlich or not objective.is_ehrlich:
            objective.validate()
        return objective

    @property
    def problem(self) -> str:
        """What is optimised, for titles: ``cfg.function`` or the objective's name."""
        return self.objective.name if self.custom_objective else self.cfg.function

    def config_dict(self) -> dict[str, Any]:
        """``config.json``'s configuration (without ``"optimizer"``): ``cfg.to_dict()`` pinned to
        the function or objective (:func:`~llome_jax.objective.objective_config`), and its
        ``config_version``."""
        custom = self.objective if self.custom_objective else None
        return {**objective_config(self.cfg.to_dict(), custom), CONFIG_VERSION: self.version()}

    @classmethod
    def version(cls) -> int:
        """The configuration's version: the number of :attr:`migrations`."""
        return len(cls.migrations)

    @classmethod
    def upgrade_config(cls, saved: dict[str, Any]) -> dict[str, Any]:
        """A saved ``config.json`` in today's form: :attr:`migrations` from its
        ``config_version`` on (:func:`llome_jax.run.migrations.migrate`). Also the command line's
        reading of a run to resume (``commands._common.apply_settings``)."""
        return migrate(saved, cls.migrations)

    def total_rounds(self) -> int:
        """Rounds the run should reach (``cfg.rounds``)."""
        return self.cfg.rounds

    def plot(self, run_dir: Any) -> None:
        """Redraw ``regret.png`` (:func:`llome_jax.run.plotting.plot_run`; legend and heading come
        from ``config.json``, as ``llome-jax compare`` names the run)."""
        plot_run(run_dir, log_x=False, **plot_options(self.objective))
