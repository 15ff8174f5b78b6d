"""Speed of the PyTorch reference LaMBO-2 (prescient-design cortex v0.0.4) for our benchmark's work.

Times, with cortex's own classes, the two phases that ``benchmarks/lambo2_round.py`` times for the
JAX port (``--preset cpu``), on the same model size and data shapes:

* ``train step``: one ``SequenceModelTree.training_step`` = 17 leaf updates (8 classifier members,
  8 regressor members, 1 MLM leaf), each on its own minibatch of 128 sequences of length 32 over a
  32-letter alphabet: tokenise, corrupt (``MaskCorruptionProcess``), forward ``Conv1dRoot`` +
  ``SumTrunk`` + that leaf's ``Conv1dBranch`` + leaf, backward, Adam step (lr 5e-3, betas
  (0.9, 0.99)). CNN: embed 32, channel 32, out 32, kernel 5, 2 root blocks, ``max_len`` 32;
  discriminative branches 1 block -> 8, generative branch 0 blocks -> 32 (bbo-bench's layout).
* ``design step``: one ``cortex.optim.generative.LaMBO.step()`` on a population of 2000 sequences
  (saliency by approximate occlusion, M = 4 edit positions, masking, K_g = 2 guidance Adam updates
  on the trunk features, K_g + 1 decode/re-score/accept passes) with the ``GraphNEI`` acquisition
  (single objective, constraints off, ``kl_weight`` 0), i.e. the paper's settings.

Harness deviations (stated in the JSON too): no Lightning ``Trainer`` / Hydra. The tree is assembled
from cortex modules the way ``SequenceModelTree.build_tree`` does, tasks get an empty stand-in data
module, minibatches are passed to ``training_step`` directly, and ``optimizers()`` /
``manual_backward()`` are bound to a plain ``torch.optim.Adam`` / ``loss.backward()``. No LR
schedule (constant lr; no effect on cost). fp32 on CPU (the reference trains with fp16 AMP on GPU).
Sequences and labels are random (costs do not depend on them).

Set-up and run (a separate venv; must not import ``llome_jax``)::

    python3 -m venv /work/cortex-venv
    /work/cortex-venv/bin/pip install torch==2.13.0 pytorch-cortex==0.0.4
    /work/cortex-venv/bin/pip install boto3 transformers==4.46.3 pandas==2.2.3 fastapi==0.88.0 \
        "pydantic<2" lightning-cloud==0.5.32 wandb==0.17.9 "setuptools<70"
    /work/cortex-venv/bin/pip uninstall -y torchvision
    taskset -c 0 /work/cortex-venv/bin/python benchmarks/lambo2_cortex_reference.py

The second line pins the 2024-era versions cortex 0.0.4 / lightning 1.9.5 work with: cortex imports
``boto3`` without declaring it; transformers 5 no longer reads cortex's ``vocab.txt``; pandas 3's
Arrow strings break ``LaMBO.step``; ``import lightning`` 1.9.5 needs fastapi < 0.89 (pydantic 1), an
old lightning-cloud, ``pkg_resources`` and a pydantic-1 wandb; the PyPI torchvision wheel does not
match the CPU torch build (cortex does not use it). Options: ``--threads`` (default 1), ``--out``
(default ``benchmarks/results/lambo2_cortex_reference.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import platform
import statistics
import string
import tempfile
import time
import warnings

import numpy as np
import torch
from _report import write_json  # benchmarks/_report.py

L = 32  # sequence length (= max_len, as in the port)
V_ALPHABET = 32
ENSEMBLE = 8
BATCH = 128
POP = 2000
ROOT = "protein_seq"
UTILITY = ["<cls>", "<pad>", "<eos>", "<unk>", ".", "-", "<mask>"]


class _NoData:
    """Stand-in for cortex's ``TaskDataModule`` (batches are passed to ``training_step``)."""

    def train_dataloader(self):
        return []

    val_dataloader = test_dataloader = train_dataloader


def build_tree(dims: dict, vocab_dir: str):
    from cortex.corruption import MaskCorruptionProcess
    from cortex.model.branch import Conv1dBranch
    from cortex.model.root import Conv1dRoot
    from cortex.model.tree import SequenceModelTree
    from cortex.model.trunk import SumTrunk
    from cortex.task import ClassificationTask, DenoisingLanguageModelTask, RegressionTask
    from cortex.tokenization import ProteinSequenceTokenizerFast
    from cortex.transforms import HuggingFaceTokenizerTransform
    from omegaconf import OmegaConf
    from torch import nn

    alphabet = list(string.ascii_uppercase) + list("abcdef")
    vocab = pathlib.Path(vocab_dir) / "vocab.txt"
    vocab.write_text("\n".join(alphabet[:V_ALPHABET] + UTILITY) + "\n")
    with contextlib.redirect_stdout(io.StringIO()):
        tok = ProteinSequenceTokenizerFast(
            vocab_file=str(vocab), custom_tokens=["-"], ambiguous_tokens=[]
        )
    root = Conv1dRoot(
        tokenizer_transform=HuggingFaceTokenizerTransform(tok),
        max_len=L,
        out_dim=dims["out"],
        embed_dim=dims["embed"],
        channel_dim=dims["channel"],
        num_blocks=2,
        kernel_size=dims["kernel"],
        corruption_process=MaskCorruptionProcess(),
    )
    fit_cfg = OmegaConf.create(
        {"linear_probing": False, "weight_averaging": None, "reinitialize_roots": False}
    )
    tree = SequenceModelTree(
        root_nodes=nn.ModuleDict({ROOT: root}),
        trunk_node=SumTrunk(in_dims=[dims["out"]], out_dim=dims["out"]),
        fit_cfg=fit_cfg,
    )
    dm, imap = _NoData(), {ROOT: ["sequence"]}
    tasks = {
        "generic_constraint": ClassificationTask(
            dm,
            imap,
            "generic_constraint",
            class_col="is_feasible",
            num_classes=2,
            root_key=ROOT,
            corrupt_train_inputs=True,
        ),
        "generic_task": RegressionTask(
            dm,
            imap,
            outcome_cols=["obj"],
            leaf_key="generic_task",
            corrupt_train_inputs=True,
            root_key=ROOT,
            nominal_label_var=0.01,
        ),
        ROOT: DenoisingLanguageModelTask(dm, imap, leaf_key=ROOT, root_key=ROOT, tokenizer=tok),
    }
    # same order / keys as bbo-bench's task list: cls 0..7, reg 0..7, MLM
    layout = [
        ("generic_constraint", "protein_constraint", ENSEMBLE, 1, 8),
        ("generic_task", "protein_property", ENSEMBLE, 1, 8),
        (ROOT, "protein_generation", 1, 0, 32),
    ]
    for task_key, branch_key, members, blocks, out in layout:
        for i in range(members):
            b_key = f"{branch_key}_{i}"
            tree.branch_nodes[b_key] = Conv1dBranch(
                in_dim=dims["out"],
                out_dim=out,
                channel_dim=out,
                num_blocks=blocks,
                kernel_size=dims["kernel"],
            )
            tree.leaf_nodes[f"{task_key}_{i}"] = tasks[task_key].create_leaf(out, b_key)
    tree.task_dict = tasks
    return tree, tok


def make_batch(rng, seqs, y, n):
    idx = rng.choice(len(seqs), n, replace=False)
    return {
        "sequence": seqs[idx],
        "is_feasible": (y[idx] > 0.2).astype(np.int64),
        "obj": y[idx],
        "batch_size": n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--train-reps", type=int, default=7)
    parser.add_argument("--design-reps", type=int, default=4)
    parser.add_argument("--embed", type=int, default=32)
    parser.add_argument("--channel", type=int, default=32)
    parser.add_argument("--out-dim", type=int, default=32)
    parser.add_argument("--kernel", type=int, default=5)
    parser.add_argument(
        "--out",
        default=str(pathlib.Path(__file__).parent / "results" / "lambo2_cortex_reference.json"),
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)
    warnings.filterwarnings("ignore")

    import cortex
    from cortex.acquisition import GraphNEI, get_graph_nei_runtime_kwargs
    from cortex.optim.generative import LaMBO

    dims = {
        "embed": args.embed,
        "channel": args.channel,
        "out": args.out_dim,
        "kernel": args.kernel,
    }
    with tempfile.TemporaryDirectory() as tmp:
        tree, tok = build_tree(dims, tmp)
    n_params = sum(p.numel() for p in tree.parameters() if p.requires_grad)

    # data: ~1000 distinct sequences (like the round-1 seed data), random labels
    rng = np.random.default_rng(0)
    alphabet = [t for t, _ in sorted(tok.vocab.items(), key=lambda kv: kv[1])][:V_ALPHABET]
    letters = np.array(alphabet)
    tok_pool = rng.integers(0, V_ALPHABET, size=(1000, L))
    seqs = np.array([" ".join(letters[row]) for row in tok_pool])
    y = rng.uniform(0.0, 1.0, size=len(seqs))

    # regressor outcome transform (what SequenceModelTree.on_fit_start does from the data module)
    feasible_y = torch.tensor(y[y > 0.2], dtype=torch.float32).view(-1, 1)
    for l_key, leaf in tree.leaf_nodes.items():
        if l_key.startswith("generic_task"):
            leaf.outcome_transform.train()
            leaf.outcome_transform(feasible_y)
            leaf.outcome_transform.eval()

    # optimiser as in SequenceModelTree.configure_optimizers (bbo-bench fit cfg)
    tree.requires_grad_(True)
    opt = torch.optim.Adam(
        tree.get_trainable_params(), lr=5e-3, betas=(0.9, 0.99), weight_decay=0.0, fused=False
    )
    tree.optimizers = lambda: opt  # Lightning would hand these in from the Trainer
    tree.manual_backward = lambda loss: loss.backward()

    def train_step():
        batch = {k: make_batch(rng, seqs, y, BATCH) for k in tree.leaf_nodes}
        t0, c0 = time.perf_counter(), time.process_time()
        tree.training_step(batch, 0)
        cpu_times.append(time.process_time() - c0)
        return time.perf_counter() - t0

    rows: list[tuple[str, float, str]] = []
    cpu_times: list[float] = []
    t_first = train_step()
    train_step()
    train_times = [train_step() for _ in range(args.train_reps)]
    train_cpu = cpu_times[2:]
    t_train = statistics.median(train_times)
    rows.append(("train step: 1st call", t_first, "eager, no compile"))
    rows.append(
        (
            "train step (17 leaf updates)",
            t_train,
            f"median of {len(train_times)}; {17 * BATCH / t_train:,.0f} seq-updates/s; "
            f"process CPU {statistics.median(train_cpu):.3f} s",
        )
    )

    # design: population = top 500 of the pool tiled 4x (alpha = 0.25 seeding)
    top = np.argsort(-y)[: POP // 4]
    pop_strs = np.tile(seqs[top], 4)
    pop_tok = tree.root_nodes[ROOT].eval_transform(pop_strs)
    tree.eval()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        t0 = time.perf_counter()
        kwargs = get_graph_nei_runtime_kwargs(
            tree, pop_strs, objectives=["generic_task"], constraints=None, scaling=None
        )
        objective = GraphNEI(["generic_task"], None, None, **kwargs)
        lambo = LaMBO(
            params=pop_tok,
            is_mutable=torch.ones(L, dtype=torch.bool),
            model=tree,
            objective=objective,
            max_num_solutions=POP,
            num_mutations_per_step=4,
            max_guidance_updates=2,
            guidance_step_size=0.05,
            guidance_layer="trunk",
            kl_weight=0.0,
            feature_attr_temp=1.0,
            domain_name=ROOT,
            exclude_initial_solution=False,
            resample_edit_positions=True,
        )
        t_setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        lambo.step()  # warm-up
        t_warm = time.perf_counter() - t0
        lambo._step_count = 0  # time design steps s = 0..reps-1, as the port's S-step run does
        design_times, design_cpu = [], []
        for _ in range(args.design_reps):
            t0, c0 = time.perf_counter(), time.process_time()
            lambo.step()
            design_times.append(time.perf_counter() - t0)
            design_cpu.append(time.process_time() - c0)
    t_design = statistics.mean(design_times)
    rows.append(("design: acquisition + LaMBO init", t_setup, "incumbents, initial scores"))
    rows.append(("design step: 1st call", t_warm, "warm-up"))
    rows.append(
        (
            f"design step ({POP} seqs, M 4, K_g 2)",
            t_design,
            f"mean of steps s=0..{len(design_times) - 1}; median "
            f"{statistics.median(design_times):.3f} s; process CPU {statistics.mean(design_cpu):.3f} s",
        )
    )
    final = lambo.get_best_solutions()
    print(
        f"cortex {cortex.__version__ if hasattr(cortex, '__version__') else '0.0.4'} reference "
        f"LaMBO-2: {n_params:,} trainable params; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    width = max(len(r[0]) for r in rows)
    for name, seconds, note in rows:
        print(f"{name:<{width}}  {seconds:8.3f} s  {note}")
    print(
        f"design: mean obj_val {float(np.mean(final['obj_val'])):.2f} after "
        f"{lambo._step_count} steps"
    )

    from importlib.metadata import version

    result = {
        "what": "PyTorch reference (cortex v0.0.4) LaMBO-2: train step and design step",
        "torch": torch.__version__,
        "cortex": version("pytorch-cortex"),
        "transformers": version("transformers"),
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "model": {
            **dims,
            "num_blocks": 2,
            "max_len": L,
            "vocab": len(tok.vocab),
            "ensemble": ENSEMBLE,
            "trainable_params": n_params,
        },
        "train": {
            "batch": BATCH,
            "leaves": len(tree.leaf_nodes),
            "seconds": train_times,
            "process_cpu_seconds": train_cpu,
        },
        "design": {
            "population": POP,
            "num_mutations": 4,
            "guidance_updates": 2,
            "guidance_step_size": 0.05,
            "kl_weight": 0.0,
            "seconds": design_times,
            "process_cpu_seconds": design_cpu,
        },
        "phases": [{"phase": n, "seconds": t, "note": note} for n, t, note in rows],
        "harness": "cortex modules + SequenceModelTree.training_step + LaMBO.step, no "
        "Lightning Trainer/Hydra; optimizers()/manual_backward bound to Adam/backward(); "
        "fp32 CPU; random data",
    }
    write_json(args.out, result)


if __name__ == "__main__":
    main()
