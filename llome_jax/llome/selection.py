"""Checkpoint selection with a validity gate (paper App. "LLM Training Details"; authors' trainers).

The paper selects hyper-parameters by validation loss, skipping set-ups whose greedy generations
have the correct format ("a list of the correct length with values in the correct range") at most
90 % of the time - "these format checks were the most important for DPO. Many DPO-trained models
achieve low validation loss despite generating sequences with incorrect format". The authors'
MargE and DPO trainers apply the same rule to the checkpoints of every round; this module holds
that rule for :func:`llome_jax.llome.finetune.train` (``LoopConfig.select_checkpoint``).

For a round of ``T`` optimizer steps, candidates are taken at the save steps (:func:`save_steps`,
every 20 % of the steps and at the end)::

    s_k = k * ceil(T / 5)  for k = 1, 2, ... while s_k < T,   and  s_K = T

For each candidate ``k`` with parameters ``theta_k``:

* ``l_k``: the round's loss on the held-out validation units (``data.train_val_split``: 95 % of
  the round's pairs/triples train, at most 100 validate), with the same reference log-probs;
* the gate (:func:`greedy_gate`): one greedy output ``y_j`` per validation prompt
  ``j = 1..n_g``, read by the run's ``SequenceCodec``::

      valid_k    = (1/n_g) sum_j [y_j parses, has L elements, all in [0, v)]
      feasible_k = (1/n_g) sum_j [y_j is valid and feasible under the DMP]   (of all n_g outputs)
      pass_k     = valid_k >= tau  and  feasible_k >= tau                     (tau = 0.9)

Candidate ``k`` becomes the *best* iff ``pass_k`` and ``l_k < l_best`` (strictly lower than the
best passing candidate so far: ties keep the earlier checkpoint; the first passing candidate with a
finite loss is always best). The round keeps the best parameters; if no candidate passes, the last
ones (:class:`Selection`).

Relation to the authors' code: it gates ``%_parsable``, ``%_correct_length``,
``%_values_in_range`` and ``%_feasible`` separately, each relative to the previous stage (so its
``%_feasible`` is feasible / in range). Here ``valid_k`` is the product of the first three and
``feasible_k = valid_k * P(feasible | valid)`` is measured over every output, which is at least as
strict. Its ``%_repeated_input <= 0.1`` condition is always met there (it compares a list with a
string) and is not implemented.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from llome_jax.llome.data import train_val_split
from llome_jax.llome.refine import _chunking, _mesh_size
from llome_jax.lm import sample  # sample.generate looked up per call (tests replace it)
from llome_jax.lm.text_format import PROMPT_TAG
from llome_jax.objective import feasible as objective_feasible

__all__ = [
    "Candidate",
    "GateResult",
    "Selection",
    "gate_result",
    "greedy_gate",
    "prompt_sequences",
    "save_steps",
    "skipped_record",
    "split_units",
]

#: Candidates per round: the authors' ``save_steps=0.2`` (a save every 20 % of the steps).
NUM_SAVES = 5


def save_steps(total_steps: int, num_saves: int = NUM_SAVES) -> tuple[int, ...]:
    """Optimizer steps (1-based counts of updates) at which a checkpoint is a candidate.

    Every ``ceil(T / num_saves)`` steps, plus the last step ``T`` if it is not a multiple.

    Example:
      >>> save_steps(10)
      (2, 4, 6, 8, 10)
      >>> save_steps(7)
      (2, 4, 6, 7)
      >>> save_steps(3)
      (1, 2, 3)
    """
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
        raise ValueError(f"total_steps must be a positive integer; got {total_steps!r}")
    if num_saves < 1:
        raise ValueError(f"num_saves must be >= 1; got {num_saves}")
    interval = -(-total_steps // num_saves)
    steps = list(range(interval, total_steps + 1, interval))
    if steps[-1] != total_steps:
        steps.append(total_steps)
    return tuple(steps)


@dataclasses.dataclass(frozen=True)
class GateResult:
    """Format/feasibility of a candidate's greedy generations.

    Attributes:
      num_outputs: ``n_g``, outputs generated (one per validation prompt).
      frac_valid: fraction parsable, of length ``L`` and in range.
      frac_feasible: fraction valid *and* feasible, of all ``n_g`` outputs.
    """

    num_outputs: int
    frac_valid: float
    frac_feasible: float

    def passes(self, threshold: float) -> bool:
        """``frac_valid >= threshold and frac_feasible >= threshold`` (NaN never passes)."""
        return bool(self.frac_valid >= threshold and self.frac_feasible >= threshold)


def gate_result(valid: Any, feasible: Any) -> GateResult:
    """The gate statistics of ``n_g`` outputs from bool ``valid [n_g]`` and ``feasible [n_g]``.

    ``feasible`` is and-ed with ``valid`` (an invalid output is never feasible). No outputs give
    NaN fractions, which fail every threshold.

    Example:
      >>> g = gate_result([True, True, True, False], [True, False, True, True])
      >>> g.frac_valid, g.frac_feasible, g.passes(0.5), g.passes(0.75)
      (0.75, 0.5, True, False)
    """
    valid = np.asarray(valid, bool)
    feasible = np.asarray(feasible, bool)
    if valid.ndim != 1 or feasible.shape != valid.shape:
        raise ValueError(
            f"valid and feasible must be bool [n] of one shape; got {valid.shape}, {feasible.shape}"
        )
    n = int(valid.size)
    if n == 0:
        return GateResult(0, float("nan"), float("nan"))
    return GateResult(n, float(np.mean(valid)), float(np.mean(valid & feasible)))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One saved checkpoint: its optimizer step, validation loss and gate statistics."""

    step: int
    val_loss: float
    gate: GateResult


@dataclasses.dataclass(frozen=True)
class Selection:
    """The best-checkpoint bookkeeping of one round (pure; parameters are kept by the caller).

    Attributes:
      threshold: ``tau``, the gate threshold [0.9].
      best: the best passing candidate so far (``None``: none passed yet).
      history: every candidate considered, in order.

    Example:
      >>> ok, bad = GateResult(8, 1.0, 0.95), GateResult(8, 1.0, 0.5)
      >>> sel = Selection(0.9)
      >>> sel, is_best = sel.consider(Candidate(2, 1.5, ok))
      >>> sel, is_best2 = sel.consider(Candidate(4, 0.7, bad))  # lower loss, fails the gate
      >>> sel, is_best3 = sel.consider(Candidate(6, 1.5, ok))  # a tie keeps step 2
      >>> (is_best, is_best2, is_best3), sel.chosen.step, sel.passed
      ((True, False, False), 2, True)
    """

    threshold: float = 0.9
    best: Candidate | None = None
    history: tuple[Candidate, ...] = ()

    def consider(self, candidate: Candidate) -> tuple[Selection, bool]:
        """``(new selection, whether candidate is the new best)``; keep its parameters if so."""
        is_best = (
            candidate.gate.passes(self.threshold)
            and math.isfinite(candidate.val_loss)
            and (self.best is None or candidate.val_loss < self.best.val_loss)
        )
        new = dataclasses.replace(
            self,
            best=candidate if is_best else self.best,
            history=(*self.history, candidate),
        )
        return new, is_best

    @property
    def passed(self) -> bool:
        """Whether some candidate passed the gate (with a finite validation loss)."""
        return self.best is not None

    @property
    def chosen(self) -> Candidate:
        """The kept checkpoint: the best passing one, else the last."""
        if not self.history:
            raise ValueError("no candidate was considered")
        return self.best if self.best is not None else self.history[-1]

    def record(self) -> dict[str, Any]:
        """The round-record fields: ``selected_step``, ``selection_passed``, ``val_loss``,
        ``gate_valid``, ``gate_feasible`` (of the kept checkpoint) and ``selection_history``
        (``[step, val_loss, gate_valid, gate_feasible]`` per candidate, non-finite as ``None``)."""
        chosen = self.chosen

        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "selected_step": int(chosen.step),
            "selection_passed": self.passed,
            "val_loss": float(chosen.val_loss),
            "gate_valid": float(chosen.gate.frac_valid),
            "gate_feasible": float(chosen.gate.frac_feasible),
            "selection_history": [
                [int(c.step), num(c.val_loss), num(c.gate.frac_valid), num(c.gate.frac_feasible)]
                for c in self.history
            ],
        }


def skipped_record(total_steps: int, reason: str) -> dict[str, Any]:
    """The round-record fields when selection could not run (the last model is kept)."""
    nan = float("nan")
    return {
        "selected_step": int(total_steps),
        "selection_passed": False,
        "val_loss": nan,
        "gate_valid": nan,
        "gate_feasible": nan,
        "selection_history": [],
        "selection_note": reason,
    }


def split_units(key: jax.Array, num_units: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(train_units, val_units)`` of ``data.train_val_split`` (95 % / at most 100), training
    units sorted; ``None`` when fewer than 2 units leave nothing to validate on."""
    if num_units < 2:
        return None
    train, val = train_val_split(key, num_units)
    return np.sort(train), val


def prompt_sequences(codec: Any, input_ids: Any, attention_mask: Any) -> np.ndarray:
    """The prompts ``x`` of tokenised training rows ``prompt(x) + target(y)``: int32 ``[B, L]``.

    Each row's real tokens are decoded to text, cut at the first ``"\\n"`` (the end of
    ``"<inc> [x]\\n"``; JSON lists hold none), the tag removed and the list parsed. Works for
    either tokenizer, also where a BPE token merged across the prompt/target boundary.

    Raises:
      ValueError: a row whose prompt does not parse.
    """
    ids = np.asarray(input_ids)
    mask = np.asarray(attention_mask).astype(bool)
    if ids.ndim != 2 or mask.shape != ids.shape:
        raise ValueError(f"input_ids and attention_mask must be [B, T]; got {ids.shape}")
    texts = codec.tokenizer.batch_decode(
        [ids[i][mask[i]].tolist() for i in range(ids.shape[0])],
        skip_special_tokens=False,
        clean_up_tokenization_spaces=False,
    )
    out = np.zeros((ids.shape[0], codec.length), np.int32)
    for i, text in enumerate(texts):
        head = text.split("\n", 1)[0].strip()
        head = head[len(PROMPT_TAG) :] if head.startswith(PROMPT_TAG) else head
        parsed = codec.parse_text(head)
        if parsed.error is not None:
            raise ValueError(f"row {i}: cannot read the prompt back ({parsed.error}): {text!r}")
        out[i] = parsed.sequence
    return out


def greedy_gate(
    model: Any,
    codec: Any,
    fn: Any,
    prompts: Any,
    *,
    batch_size: int = 1024,
    mesh: Any = None,
) -> GateResult:
    """Greedy-decode one output per prompt (as refinement's greedy job) and gate it.

    Args:
      model: a :class:`llome_jax.lm.pythia.Pythia` carrying the candidate's parameters.
      codec: the run's :class:`llome_jax.lm.codec.SequenceCodec`.
      fn: the Ehrlich function (its constraint check ``ehrlich.is_feasible``; no oracle call) or
        an :class:`~llome_jax.objective.Objective` (its ``is_feasible``; all feasible without one).
      prompts: int ``[n_g, L]`` validation inputs ``x``.
      batch_size: at most this many rows per ``generate`` call (chunks as in refinement).
      mesh: optional data-parallel mesh.

    Returns:
      :class:`GateResult` of the ``n_g`` outputs.
    """
    x = np.asarray(prompts, np.int32)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"prompts must be a non-empty int array [n, L]; got {x.shape}")
    n = x.shape[0]
    ids, mask = codec.encode_prompts(x)
    chunk, num_chunks = _chunking(n, batch_size, _mesh_size(mesh))
    rows = np.concatenate([np.arange(n), np.zeros(chunk * num_chunks - n, np.int64)])
    ids, mask = ids[rows], mask[rows]  # padding rows repeat row 0 (discarded)
    model_vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    config = sample.SampleConfig(
        max_new_tokens=codec.max_new_tokens,
        top_k=None,  # greedy rows take the argmax of the raw logits
        stop_token_ids=tuple(int(t) for t in codec.stop_token_ids),
        pad_token_id=int(codec.pad_token_id),
        vocab_limit=codec.vocab_size if model_vocab and model_vocab > codec.vocab_size else None,
    )
    key = jax.random.key(0)  # unused by greedy rows
    outs = [
        sample.generate(
            key,
            model,
            ids[c * chunk : (c + 1) * chunk],
            mask[c * chunk : (c + 1) * chunk],
            config,
            0.0,
            mesh=mesh,
        )
        for c in range(num_chunks)
    ]
    tokens = np.concatenate([np.asarray(o.tokens) for o in outs])[:n]
    sequences, valid = codec.decode(tokens)
    feasible = objective_feasible(fn, sequences)
    return gate_result(valid, feasible)
