"""What a LLOME run needs besides its configuration and state: the explicit runtime.

:class:`Runtime` holds the objective (an :class:`~llome_jax.objective.Objective`: the Ehrlich
function of ``cfg.function`` with its start sequence, or one of your own), the sequence codec,
the model (an NNX module whose graph every round uses; parameters always come from the
:class:`~llome_jax.llome.state.LoopState`) and the device mesh. The driver builds it once per run
with :meth:`Runtime.build` and passes it to every phase; nothing is cached at module level.

The runtime also owns the run's compiled train/eval steps (:meth:`Runtime.compiled`): a new
optimizer configuration means a new compilation, an old one is reused within the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp

from llome_jax.host import parallel
from llome_jax.llome.config import LoopConfig, check_weights_dir
from llome_jax.lm.codec import SequenceCodec
from llome_jax.lm.convert import from_pretrained
from llome_jax.lm.pythia import Pythia, PythiaConfig
from llome_jax.lm.tokenizer import load_tokenizer, make_ehrlich_tokenizer
from llome_jax.objective import ehrlich_objective
from llome_jax.training.step import split_params

__all__ = ["Runtime", "initial_params", "model_with", "named_key", "split_model"]


def named_key(key: jax.Array, name: str) -> jax.Array:
    """A key for one-off uses (GA, model init, the loop) derived from the run key
    (``jax.random.key(seed)``) and a name."""
    salt = {"ga": 1, "init": 2, "loop": 3}[name]
    return jax.random.fold_in(key, salt)


@dataclasses.dataclass(frozen=True, eq=False)
class Runtime:
    """The objective, codec, model and mesh of one run (built once by the driver).

    Attributes:
      objective: the :class:`~llome_jax.objective.Objective` (labels, constraint checks, the
        start sequence ``objective.x0``, the GA's initial particle).
      codec: ``lm.codec.SequenceCodec`` between sequences and token ids.
      model: the NNX policy model (graph structure + initial parameters).
      mesh: the data-parallel mesh, or ``None`` (one device).
      custom_objective: whether ``objective`` was given instead of resolved from ``cfg.function``.
    """

    objective: Any
    codec: Any
    model: Any
    mesh: Any
    custom_objective: bool = False
    _compiled: dict[Hashable, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def fn(self) -> Any:
        """The Ehrlich instance behind the objective, or the objective itself when there is none
        (what the phases' ``fn`` arguments accept)."""
        return self.objective.ehrlich if self.objective.is_ehrlich else self.objective

    @property
    def x0(self) -> Any:
        """The GA's start sequence: int32 ``[L]``."""
        return self.objective.x0

    @classmethod
    def build(cls, cfg: LoopConfig, objective: Any = None) -> Runtime:
        """The runtime of ``cfg``: resolves the function (unless ``objective``, an
        :class:`~llome_jax.objective.Objective`, is given), builds the tokenizer and the model
        (from ``cfg.weights``, or from scratch with a seed derived from ``cfg.seed``)."""
        from flax import nnx

        custom = objective is not None
        if objective is None:
            objective = ehrlich_objective(cfg.function, cfg.instance_seed)
        num_states, length = objective.num_states, objective.length
        if cfg.weights is not None:
            directory = check_weights_dir(cfg.weights)
            tokenizer = load_tokenizer(directory)
            model = from_pretrained(directory)
        else:
            tokenizer = make_ehrlich_tokenizer(num_states)
            config = PythiaConfig.preset(
                cfg.model, vocab_size=len(tokenizer), **dict(cfg.model_overrides)
            )
            init_seed = int(
                jax.random.randint(named_key(jax.random.key(cfg.seed), "init"), (), 0, 2**31 - 1)
            )
            model = Pythia(config, rngs=nnx.Rngs(init_seed))
        codec = SequenceCodec(tokenizer, num_states, length, separators=cfg.text_format == "list")
        mesh = parallel.make_mesh() if cfg.data_parallel and jax.device_count() > 1 else None
        return cls(
            objective=objective,
            codec=codec,
            model=model,
            mesh=mesh,
            custom_objective=custom,
        )

    def compiled(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """``build()`` once per ``key`` for the life of this runtime (jitted steps, models in
        another dtype)."""
        if key not in self._compiled:
            self._compiled[key] = build()
        return self._compiled[key]


def split_model(model: Any) -> tuple[Any, Any, Any]:
    """``(graphdef, params, rest)`` of an NNX module (``nnx.Param`` leaves vs the others)."""
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, params, rest


def model_with(model: Any, params: Any) -> Any:
    """A copy of ``model`` carrying ``params`` (a pure dict)."""
    from flax import nnx

    graphdef, state, rest = split_model(model)
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state, rest)


def initial_params(model: Any) -> Any:
    """A copy of the model's parameters as a pure dict (the state owns it; steps donate it)."""
    _, params, _ = split_params(model)
    return jax.tree.map(jnp.copy, params)
