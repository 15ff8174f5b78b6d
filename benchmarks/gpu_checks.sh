#!/usr/bin/env bash
# The checks that need an accelerator, as one script with one JSON summary (issue 36). Run from
# the repository root on a GPU machine whose Python has jax[cuda], flax, optax and orbax:
#
#   bash benchmarks/gpu_checks.sh              # every default step: <= 8 min in all (BUDGET=460
#                                              # s for the steps, + the last one's kill grace)
#   bash benchmarks/gpu_checks.sh --dry-run    # the same steps, tiny shapes, on the CPU
#   bash benchmarks/gpu_checks.sh ehrlich pythia_generate    # some steps only (`pythia` and
#                                              # `lambo2` name both steps of that kind)
#
# Steps (in this order; each one time-boxed, and none starts past the overall budget):
#   ehrlich            Ehrlich f2, f4 at 1e7 sequences: the backend's default chunk (65,536 on a
#                      GPU, ehrlich.default_chunk_size) against 128 and 512 (the CPU defaults of
#                      f4 and f2) and the whole batch (0); values checked bit for bit
#                      (benchmarks/ehrlich_throughput.py)
#   pythia_generate    one `paper` refinement chunk of a random Pythia-2.8B (256 rows, 67 + 73
#                      tokens, T = 1, no early stop), bf16 then fp32 (SampleConfig.compute_dtype;
#                      benchmarks/pythia_speed.py --paper-chunk)
#   lambo2_paper_step  the LaMBO-2 `paper` preset's train step (per-leaf vs fused with
#                      `--compare-steps` where benchmarks/lambo2_round.py has it, else a round
#                      with 1 epoch and 1 design step)
#   lambo2_cpu         one LaMBO-2 round of the `cpu` preset on f2, by phase
#   llome_cpu          the GA seed data and 3 LLOME rounds of the `cpu` preset on f2
#                      (benchmarks/llome_round.py)
#   pythia_marge       the `paper` preset's Pythia-2.8B MargE train step, fp32 (training stays
#                      fp32; benchmarks/paper_scale_gpu.py)
#   lambo2run          (not by default) a whole LaMBO-2 `paper` run on a training instance of the
#                      f2 configuration for at most $RUN_SECONDS (300) s
#
# Output in $OUT (default benchmarks/results/gpu, or benchmarks/results/gpu_dry with --dry-run):
# one JSON per step, logs/<step>.log, and summary.json: the environment (jax, devices,
# nvidia-smi) and per step its command, exit code, seconds, whether it timed out, and its JSON
# result or, failing that, the last lines of its log. Settings: BUDGET (seconds for all steps),
# PYTHON (default python3), OUT, INSTANCE and RUN_SECONDS (lambo2run).
set -u
mode=gpu
requested=()
for arg in "$@"; do
  case $arg in
    --dry-run) mode=dry ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "unknown option $arg (try --help)" >&2; exit 2 ;;
    *) requested+=("$arg") ;;
  esac
done
PY=${PYTHON:-python3}
if [ "$mode" = dry ]; then
  OUT=${OUT:-benchmarks/results/gpu_dry}
  BUDGET=${BUDGET:-600}
  export JAX_PLATFORMS=cpu
else
  OUT=${OUT:-benchmarks/results/gpu}
  BUDGET=${BUDGET:-460}
  export JAX_PLATFORMS=${JAX_PLATFORMS:-cuda}
  export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
fi
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
defaults=(ehrlich pythia_generate lambo2_paper_step lambo2_cpu llome_cpu pythia_marge)
[ ${#requested[@]} -eq 0 ] && requested=("${defaults[@]}")
steps=()
for step in "${requested[@]}"; do
  case $step in  # the step names of the first version of this script
    pythia) steps+=(pythia_generate pythia_marge) ;;
    lambo2) steps+=(lambo2_paper_step lambo2_cpu) ;;
    *) steps+=("$step") ;;
  esac
done
STATUS=$OUT/steps.jsonl
: > "$STATUS"
T0=$(date +%s)

# run_step NAME LIMIT_SECONDS RESULT_JSON COMMAND...: run COMMAND under `timeout` (the smaller of
# LIMIT and what is left of BUDGET; skipped when under 20 s are left), log to logs/NAME.log, and
# append one status line to steps.jsonl. The result file is removed first, so a failed step never
# reports an older run's numbers.
run_step() {
  local name=$1 limit=$2 result=$3
  shift 3
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  local log=$OUT/logs/$name.log
  rm -f "$result"
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, $left s of the $BUDGET s budget left"
    printf '{"step": "%s", "skipped": "budget", "left_s": %d}\n' "$name" "$left" >> "$STATUS"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit $limit s): $*"
  local start=$(date +%s)
  timeout --kill-after=15 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  local seconds=$(( $(date +%s) - start ))
  tail -n 6 "$log" | cut -c1-400
  echo "== $name: exit $rc after $seconds s"
  "$PY" - "$name" "$rc" "$seconds" "$limit" "$result" "$log" "$*" >> "$STATUS" <<'PYEOF'
import json, sys
name, rc, seconds, limit, result, log, command = sys.argv[1:]
print(json.dumps({"step": name, "rc": int(rc), "seconds": int(seconds), "limit_s": int(limit),
                  "timed_out": int(rc) in (124, 137), "result": result, "log": log,
                  "command": command}))
PYEOF
}

# the environment, recorded first (a broken install fails here, in seconds)
timeout 120 "$PY" -c "
import json, jax, flax, optax
print(json.dumps({'jax': jax.__version__, 'flax': flax.__version__, 'optax': optax.__version__,
                  'backend': jax.default_backend(), 'devices': [str(d) for d in jax.devices()]}))
" > "$OUT/env.json" 2> "$OUT/logs/env.log" || echo "environment check failed: $OUT/logs/env.log"
cat "$OUT/env.json" 2>/dev/null
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
  || echo "no nvidia-smi"; } > "$OUT/nvidia_smi.txt"

fused_flag=no
grep -q -- '--compare-steps' benchmarks/lambo2_round.py && fused_flag=yes
for step in "${steps[@]}"; do
  result=$OUT/$step.json
  case $mode:$step in
    gpu:ehrlich)
      run_step "$step" 90 "$result" "$PY" benchmarks/ehrlich_throughput.py --functions f2,f4 \
        --batches 1e7 --repeats 3 --chunk-sizes 128,512,0 --out "$result" ;;
    dry:ehrlich)
      run_step "$step" 120 "$result" "$PY" benchmarks/ehrlich_throughput.py --functions f2,f4 \
        --batches 1e4 --repeats 1 --chunk-sizes 128,0 --out "$result" ;;
    gpu:pythia_generate)
      run_step "$step" 120 "$result" "$PY" benchmarks/pythia_speed.py --paper-chunk \
        --preset 2.8b --reps 2 --chunk-dtypes bfloat16,float32 --out "$result" ;;
    dry:pythia_generate)
      run_step "$step" 120 "$result" "$PY" benchmarks/pythia_speed.py --paper-chunk \
        --preset 70m --chunk-rows 8 --chunk-prompt 8 --chunk-new 4 --reps 1 \
        --chunk-dtypes bfloat16,float32 --out "$result" ;;
    gpu:lambo2_paper_step)
      if [ $fused_flag = yes ]; then
        run_step "$step" 100 "$result" "$PY" benchmarks/lambo2_round.py --compare-steps \
          --preset paper --reps 5 --warmup 2 --out "$result"
      else
        run_step "$step" 100 "$result" "$PY" benchmarks/lambo2_round.py --preset paper \
          --epochs 1 --design-steps 1 --num-samples 256 --out "$result"
      fi ;;
    dry:lambo2_paper_step)
      if [ $fused_flag = yes ]; then
        run_step "$step" 120 "$result" "$PY" benchmarks/lambo2_round.py --compare-steps \
          --preset smoke --reps 1 --warmup 1 --out "$result"
      else
        run_step "$step" 120 "$result" "$PY" benchmarks/lambo2_round.py --preset smoke \
          --epochs 1 --design-steps 1 --num-samples 32 --out "$result"
      fi ;;
    gpu:lambo2_cpu)
      run_step "$step" 100 "$result" "$PY" benchmarks/lambo2_round.py --preset cpu \
        --out "$result" ;;
    dry:lambo2_cpu)
      run_step "$step" 120 "$result" "$PY" benchmarks/lambo2_round.py --preset smoke \
        --epochs 1 --design-steps 2 --num-samples 32 --out "$result" ;;
    gpu:llome_cpu)
      run_step "$step" 120 "$result" "$PY" benchmarks/llome_round.py --preset cpu --rounds 3 \
        --out "$result" ;;
    dry:llome_cpu)
      run_step "$step" 120 "$result" "$PY" benchmarks/llome_round.py --preset smoke --rounds 1 \
        --out "$result" ;;
    gpu:pythia_marge)
      run_step "$step" 110 "$result" "$PY" benchmarks/paper_scale_gpu.py --losses marge \
        --steps 1 --out "$result" ;;
    dry:pythia_marge)
      run_step "$step" 120 "$result" "$PY" benchmarks/paper_scale_gpu.py --model 70m \
        --losses marge --steps 1 --microbatches 4 --tokens 16 --out "$result" ;;
    *:lambo2run)
      # a fresh run directory; the time box ends it (exit 124), its rounds.jsonl is the result.
      # JAX_LOG_COMPILES names each compiled function in the log, so a memory warning from XLA
      # (the paper preset asked for ~65 GiB in rounds 0-1 on an H100) can be traced to its program
      run=$OUT/lambo2run
      rm -rf "$run"
      preset=paper; [ "$mode" = dry ] && preset=smoke
      run_step "$step" "${RUN_SECONDS:-300}" "$run/rounds.jsonl" env JAX_LOG_COMPILES=1 "$PY" \
        -m llome_jax.cli lambo2 --preset $preset --function "Ehr(32,32)-4-4-4" \
        --instance-seed "${INSTANCE:-102}" --seed 0 --out "$run" --no-progress ;;
    *) echo "unknown step $step (steps: ${defaults[*]} lambo2run)"
       printf '{"step": "%s", "skipped": "unknown step"}\n' "$step" >> "$STATUS" ;;
  esac
done

# one summary: the environment and, per step, its status with its JSON result or its log's tail
"$PY" - "$OUT" "$mode" "$BUDGET" "$(( $(date +%s) - T0 ))" <<'PYEOF'
import json, pathlib, subprocess, sys, time
out, mode, budget, total = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]

def read_json(path):
    try:
        text = pathlib.Path(path).read_text()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:  # e.g. rounds.jsonl: one record per line
        return [json.loads(line) for line in text.splitlines() if line.strip()]

steps = {}
for line in (out / "steps.jsonl").read_text().splitlines():
    status = json.loads(line)
    name = status.pop("step")
    if "result" in status:
        status["result_file"] = path = status.pop("result")
        result = read_json(path)
        if status["rc"] == 0 and result is not None:
            status["result"] = result
        else:
            if result is not None:  # written by the step (removed before it): partial, e.g.
                status["partial_result"] = result  # the rounds a time-boxed run finished
            log = pathlib.Path(status["log"])
            tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
            status["error"] = "\n".join(tail)[-4000:]
    steps[name] = status
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True).stdout.strip())
smi = out / "nvidia_smi.txt"
summary = {
    "mode": mode,
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "commit": commit + ("+uncommitted" if dirty else ""),
    "budget_s": budget,
    "total_s": int(total),
    "environment": read_json(out / "env.json"),
    "nvidia_smi": smi.read_text().strip() if smi.exists() else None,
    "steps": steps,
}
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
def verdict(status):
    if "skipped" in status:
        return "skipped (" + status["skipped"] + ")"
    if status["rc"] == 0:
        return "ok"
    return "timed out" if status["timed_out"] else "exit " + str(status["rc"])

ok = sum(status.get("rc") == 0 for status in steps.values())
print(f"wrote {out / 'summary.json'}: {ok}/{len(steps)} steps ok in {total} s")
for name, status in steps.items():
    print(f"  {name}: {verdict(status)}")
PYEOF
