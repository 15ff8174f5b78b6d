#!/usr/bin/env bash
# The checks that need an accelerator, as one script (run from the repository root on a GPU
# machine whose Python has jax[cuda], flax, optax and orbax; results go to $OUT, default
# benchmarks/results/gpu). Each step is time-boxed, so a slow one does not starve the rest.
#
#   1. Ehrlich throughput on the GPU (f2, f4 at 1e5-1e7 sequences; the default L1-sized chunks
#      against 8192, 65536 and whole-batch chunks);
#   2. one LaMBO-2 round of the `paper` preset (128/128/128 CNN, E 100) on f2, by phase;
#   3. the `paper` preset's Pythia-2.8B MargE train step and one refinement chunk (random weights);
#   4. `lambo2run`: a whole LaMBO-2 run of the `paper` preset on a training instance of the f2
#      configuration (Ehr(32,32)-4-4-4, instance seed $INSTANCE, default 102) for at most
#      $RUN_SECONDS (default 300) seconds; its rounds.jsonl and evaluated.csv are copied to $OUT,
#      with the log (compilations named).
#
# Usage: bash benchmarks/gpu_checks.sh [STEP...]   (steps: pythia ehrlich lambo2 lambo2run;
# default: the first three)
set -u
OUT=${OUT:-benchmarks/results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
steps=${*:-pythia ehrlich lambo2}
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
python3 -c "import jax, flax, optax, orbax.checkpoint as o; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
for step in $steps; do
  start=$(date +%s)
  case $step in
    ehrlich)
      JAX_PLATFORMS=cuda timeout 90 python3 benchmarks/ehrlich_throughput.py --functions f2,f4 \
        --batches 1e5,1e6,1e7 --repeats 3 --chunk-sizes 8192,65536,0 2>&1 | tail -n 20
      cp benchmarks/results/ehrlich_throughput*.json "$OUT"/ 2>/dev/null ;;
    lambo2)
      timeout 240 python3 benchmarks/lambo2_round.py --preset paper \
        --out "$OUT/lambo2_round_paper.json" 2>&1 | tail -n 25 ;;
    pythia)
      timeout 200 python3 benchmarks/paper_scale_gpu.py --losses marge --steps 2 \
        --out "$OUT/paper_scale_gpu.json" 2>&1 | tail -n 5 | cut -c1-1500
      timeout 100 python3 benchmarks/paper_scale_gpu.py --losses generate \
        --out "$OUT/paper_scale_gpu.json" 2>&1 | tail -n 5 | cut -c1-1500 ;;
    lambo2run)
      run=/tmp/lambo2_paper_run
      # JAX_LOG_COMPILES names each compiled function in the log, so a memory warning from XLA
      # (the paper preset asked for ~65 GiB in rounds 0-1 on an H100) can be traced to its program
      JAX_LOG_COMPILES=1 timeout "${RUN_SECONDS:-300}" python3 -m llome_jax.cli lambo2 \
        --preset paper --function "Ehr(32,32)-4-4-4" --instance-seed "${INSTANCE:-102}" \
        --seed 0 --out "$run" --no-progress 2>&1 | tee "$OUT/lambo2run.log" | tail -n 30
      cp "$run"/rounds.jsonl "$run"/config.json "$run"/evaluated.csv "$OUT"/ 2>/dev/null ;;
    *) echo "unknown step $step" ;;
  esac
  echo "== $step: $(( $(date +%s) - start )) s"
done
