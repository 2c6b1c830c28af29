#!/usr/bin/env bash
# The GPU campaign of issues 30 and 31: every GPU measurement stackcost owes, in parts that
# each end well inside the device tool's 10-minute command limit, so a session's few
# minutes of GPU time go to measuring, not to typing commands.
#
#   bash benchmarks/gpu/campaign.sh OUTDIR [--device cuda|cpu] [--within S] [--pack FILE]
#                                   [PART ...]
#   bash benchmarks/gpu/campaign.sh --list
#
# OUTDIR gets logs/PART.log, stores/PART.db, summary.tsv (part, exit code, seconds, budget)
# and, from the `report` part, every run exported as run-json plus HTML and markdown.
# No PART: all of them, in the order of --list (most important first). Each part runs
# under `timeout` with its budget; a part that fails or runs out of time is a line in
# summary.tsv and the campaign goes on (a run's finished cells are already in its store).
#
# --within S: the whole call must end within S seconds (the device tool's command limit):
# each part's budget shrinks to the time left, and a part with under a minute left is
# skipped (a line in summary.tsv). --pack FILE: OUTDIR as a .tgz at the end, whatever failed
# (the device tool brings back a few files, not a tree).
#
# --device cpu is the dry run for a machine without a GPU: the same commands, at small
# sizes, through this checkout's .venv, so everything but the GPU is checked here.
# On the GPU machine (no registry, Python 3.12 at /opt/torch/.venv) the wheels from
# benchmarks/gpu/wheels.sh, carried as .whl/, are installed into a folder of their own.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)

# part -> budget on the GPU, seconds (the dry run uses the same budgets)
parts=(env build tests peaks levels ladder precisions profile copies train-table train jax bench
  suite tests-all report)
declare -A budget=(
  [env]=60 [build]=300 [tests]=240 [peaks]=120 [levels]=300 [ladder]=540 [precisions]=300
  [profile]=300 [copies]=180 [train-table]=240 [train]=420 [jax]=240 [bench]=420 [suite]=580
  [tests-all]=580 [report]=120
)
declare -A about=(
  [env]="the GPU, driver, CUDA, cuDNN, torch and JAX versions; stackcost env; list backends"
  [build]="the native programs: libtorch and torchscript-cpp against CUDA libtorch, cudnn"
  [tests]="the tests that skip without a GPU (pytest -m gpu: their skip reason says so)"
  [tests-all]="the whole test suite on the GPU machine: the rest must still pass there"
  [peaks]="measured GEMM (fp32, tf32, bf16, fp16) and memory-bandwidth peaks of the GPU"
  [levels]="issue 31: resnet50 at eager, torchscript, libtorch, cudnn; b1,8,32,128 224 px"
  [ladder]="issue 30: resnet50 through the PyTorch rungs and LibTorch, b1..256x2 224 px"
  [precisions]="fp32, tf32, bf16, fp16, amp on eager and inductor, resnet50 b32"
  [profile]="GPU time (kernels, copies, idle), NVML power and energy, a batch's copy to the GPU"
  [copies]="training's host->device copy per batch: resnet18 on digits, pinned then pageable"
  [train-table]="the PyTorch/CUDA report's table: mnist-cnn, 1 epoch, cpu|cuda x 1|all threads"
  [train]="resnet18 on digits to >=95% at eager, inductor, torchscript, libtorch, cudnn"
  [jax]="the jax rung on the GPU beside eager, verified"
  [bench]="harness overhead (CUDA events), agreement with do_bench and Timer, roofline"
  [suite]="stackcost suite default --device cuda"
  [report]="every run exported (run-json), an HTML report and markdown tables per store"
)

usage() {
  echo "usage: campaign.sh OUTDIR [--device cuda|cpu] [--within S] [--pack FILE] [PART ...]" \
    "(campaign.sh --list)"
}

if [ "${1:-}" = "--list" ]; then
  for p in "${parts[@]}"; do printf '%-12s %4ss  %s\n' "$p" "${budget[$p]}" "${about[$p]}"; done
  exit 0
fi
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  usage >&2
  exit 2
fi
out=$1
shift
device=cuda
within=0
pack=
chosen=()
while [ $# -gt 0 ]; do
  case $1 in
    --device)
      device=${2:-}
      shift 2 || { usage >&2; exit 2; }
      ;;
    --within)
      within=${2:-}
      shift 2 || { usage >&2; exit 2; }
      if ! [[ $within =~ ^[1-9][0-9]*$ ]]; then
        echo "campaign.sh: --within '$within' is not a number of seconds (e.g. 570)" >&2
        exit 2
      fi
      ;;
    --pack)
      pack=${2:-}
      shift 2 || { usage >&2; exit 2; }
      [ -n "$pack" ] || { echo "campaign.sh: --pack needs a file name" >&2; exit 2; }
      ;;
    -h | --help) usage; exit 0 ;;
    -*)
      echo "campaign.sh: unknown option $1 (allowed: --device, --within, --pack, --list)" >&2
      exit 2
      ;;
    *) chosen+=("$1"); shift ;;
  esac
done
if [ "$device" != cuda ] && [ "$device" != cpu ]; then
  echo "campaign.sh: --device '$device' is not a device (allowed: cuda, cpu)" >&2
  exit 2
fi
for p in "${chosen[@]}"; do
  if [ -z "${budget[$p]:-}" ]; then
    echo "campaign.sh: unknown part '$p' (allowed: ${parts[*]})" >&2
    exit 2
  fi
done
[ ${#chosen[@]} -gt 0 ] || chosen=("${parts[@]}")

# --- the Python that runs stackcost ------------------------------------------------------
if [ "$device" = cuda ]; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "campaign.sh: no NVIDIA GPU here (nvidia-smi failed): use --device cpu for a dry run" >&2
    exit 2
  fi
  py=python3  # the image's: torch with CUDA, JAX with CUDA, nvidia-cudnn-cu13
  site=/tmp/stackcost-site
  if compgen -G "$repo/.whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$repo"/.whl/*.whl || exit 1
  fi
  export PYTHONPATH=$site:$repo/src
else
  py=$repo/.venv/bin/python
  [ -x "$py" ] || { echo "campaign.sh: no .venv here: run make install first" >&2; exit 2; }
  export PYTHONPATH=$repo/src
fi
export PYTHONUNBUFFERED=1 COLUMNS=200  # logs, not a terminal: tables at full width
mkdir -p "$out/logs" "$out/stores" || exit 2
out=$(cd "$out" && pwd)

# --- sizes: the study's on the GPU, a smoke test's on the CPU ----------------------------
all_threads=$(nproc)
if [ "$device" = cuda ]; then
  model=resnet50 res=224 levels_batches=1,8,32,128 ladder_batches=1..256x2 prec_batch=32
  profile_batches=1,32 timing=(--min-time 0.5 --max-time 5)
  train_args=(--epochs 5) table_args=(--epochs 1) bench_args=()
  agreement_args=(--min-time 0.5)  # 5 blocks of resnet18 b32 at 0.5 s a side: about 3 min
else
  model=resnet18 res=32 levels_batches=1,2 ladder_batches=1,2 prec_batch=2
  profile_batches=1 timing=(--min-time 0.1 --max-time 1)
  train_args=(--epochs 1 --limit 256) table_args=(--epochs 1 --limit 256) bench_args=(--quick)
  agreement_args=()
fi
sc() { "$py" -m stackcost.cli "$@"; }
store() { echo "$out/stores/$1.db"; }

# --- the parts ---------------------------------------------------------------------------
part_env() {
  if [ "$device" = cuda ]; then
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm \
      --format=csv
  fi
  "$py" - <<'PY'
import importlib.metadata as md
import platform

import torch

print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("cudnn", torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", p.multi_processor_count, "SMs")
for name in ("jax", "jaxlib", "triton", "nvidia-ml-py", "nvidia-cudnn-cu13", "pydantic"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
PY
  sc env
  sc list backends
}

part_build() {
  sc build --backends libtorch,torchscript-cpp,cudnn
}

part_tests() {
  (cd "$repo" && "$py" -m pytest -q -rs -m gpu -p no:cacheprovider \
    --junitxml="$out/logs/tests.xml")
}

part_tests_all() {
  (cd "$repo" && "$py" -m pytest -q -rs -p no:cacheprovider --junitxml="$out/logs/tests-all.xml")
}

part_peaks() {
  if [ "$device" = cuda ]; then
    sc peaks --device cuda --json
  else
    sc peaks --device cpu --quick --threads 1 --json
  fi
}

part_levels() {
  sc run "$model" --device "$device" --backends eager,torchscript,libtorch,cudnn \
    --batch-size "$levels_batches" --resolution "$res" "${timing[@]}" --db "$(store levels)"
}

part_ladder() {
  sc run "$model" --device "$device" \
    --backends eager,torchscript,inductor,export-aot,torchscript-cpp,libtorch \
    --batch-size "$ladder_batches" --resolution "$res" "${timing[@]}" --db "$(store ladder)"
}

part_precisions() {
  sc run "$model" --device "$device" --backends eager,inductor \
    --precision fp32,tf32,bf16,fp16,amp --batch-size "$prec_batch" --resolution "$res" \
    "${timing[@]}" --db "$(store precisions)"
}

part_profile() {
  # --profile: the time breakdown, FLOPs against the measured peak, NVML utilization and
  # power, energy; 2 s of timed loop at least, so the energy counter updates many times.
  sc run "$model" --device "$device" --backends eager,torchscript,inductor \
    --batch-size "$profile_batches" --resolution "$res" --profile --min-time 2 --max-time 10 \
    --db "$(store profile)"
}

part_copies() {
  sc train resnet18 --dataset digits --device "$device" --backends eager "${table_args[@]}" \
    --db "$(store copies)"
  [ "$device" = cuda ] || return 0  # --pageable is about the copy to a GPU
  sc train resnet18 --dataset digits --device cuda --backends eager "${table_args[@]}" \
    --pageable --db "$(store copies)"
}

part_train_table() {
  local devices=cpu
  [ "$device" = cuda ] && devices=cpu,cuda
  sc train mnist-cnn --dataset digits --backends eager --device "$devices" \
    --threads "1,$all_threads" "${table_args[@]}" --db "$(store train-table)"
}

part_train() {
  sc train resnet18 --dataset digits --device "$device" \
    --backends eager,inductor,torchscript,libtorch,cudnn "${train_args[@]}" \
    --db "$(store train)"
}

part_jax() {
  sc run "$model" --device "$device" --backends eager,jax --batch-size "$profile_batches" \
    --resolution "$res" "${timing[@]}" --db "$(store jax)"
}

part_bench() {
  local b rc=0
  for b in harness_overhead agreement roofline; do
    local extra=()
    [ $b = agreement ] && extra=("${agreement_args[@]}")
    (cd "$repo" && "$py" "benchmarks/$b.py" --device "$device" "${bench_args[@]}" "${extra[@]}" \
      --json "$out/bench-$b.json") || rc=1
  done
  return $rc
}

part_suite() {
  if [ "$device" = cuda ]; then
    sc suite default --device cuda --db "$(store suite)"
  else
    sc suite tiny --device cpu --db "$(store suite)"
  fi
}

part_report() {
  local db name id
  mkdir -p "$out/reports"
  for db in "$out"/stores/*.db; do
    [ -e "$db" ] || continue
    name=$(basename "$db" .db)
    sc report --db "$db" --all -o "$out/reports/$name.html"
    sc report --db "$db" --all --format md -o "$out/reports/$name.md"
    for id in $("$py" -c "import sqlite3, sys
for (i,) in sqlite3.connect(sys.argv[1]).execute('SELECT id FROM runs ORDER BY id'):
    print(i)" "$db"); do
      sc report --db "$db" "$id" --format run-json -o "$out/reports/$name-$id.run.json"
    done
  done
}

# --- run them ----------------------------------------------------------------------------
[ -s "$out/summary.tsv" ] || printf 'part\texit\tseconds\tbudget\tdevice\n' >"$out/summary.tsv"
functions=()
for p in "${chosen[@]}"; do functions+=("part_${p//-/_}"); done
export -f sc store "${functions[@]}"
export py out device model res levels_batches ladder_batches prec_batch profile_batches
export all_threads repo
failed=0
began=$(date +%s)
for p in "${chosen[@]}"; do
  log=$out/logs/$p.log
  limit=${budget[$p]}
  [ "$device" = cuda ] || limit=$((2 * limit))  # two slow cores for a dry run's compiles
  if [ "$within" -gt 0 ]; then
    left=$((within - ($(date +%s) - began) - 30))  # 30 s kept for the kill and the pack
    if [ $left -lt 60 ]; then
      echo "== $p: skipped, ${left} s left of --within $within"
      printf '%s\tskipped\t0\t%s\t%s\n' "$p" "$left" "$device" >>"$out/summary.tsv"
      failed=$((failed + 1))
      continue
    fi
    [ $left -lt "$limit" ] && limit=$left
  fi
  echo "== $p (${limit} s): ${about[$p]}"
  start=$(date +%s)
  # Arrays do not cross `export`: each part gets the sizes it needs by name.
  timeout --signal=INT --kill-after=30 "$limit" bash -c \
    "$(declare -p timing train_args table_args bench_args agreement_args); part_${p//-/_}" \
    >"$log" 2>&1
  rc=$?
  seconds=$(($(date +%s) - start))
  [ $rc -eq 124 ] && echo "   out of time after $limit s" >>"$log"
  printf '%s\t%s\t%s\t%s\t%s\n' "$p" "$rc" "$seconds" "$limit" "$device" \
    >>"$out/summary.tsv"
  echo "   exit $rc in ${seconds} s  ($log)"
  tail -n 3 "$log" | sed 's/^/   | /'
  [ $rc -eq 0 ] || failed=$((failed + 1))
done
echo "$failed of ${#chosen[@]} parts failed or were skipped; $out/summary.tsv"
if [ -n "$pack" ]; then
  tar czf "$pack" -C "$(dirname "$out")" "$(basename "$out")" && ls -l "$pack"
fi
[ $failed -eq 0 ]
