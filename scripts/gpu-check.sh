#!/usr/bin/env bash
# The GPU tests and benchmarks, on a GPU machine, from the checkout's root; a short table last.
#
#   scripts/gpu-check.sh [SECTION...]      (default: every section whose code is present)
#
# Sections: probe (bytecode: always, compiles what has none, as pip does) memory-tests memory-bench cupy-allocators-bench vs-dask-cuda-bench
#           cluster-start-bench compat-tests cluster-tests serialize-tests convert-tests mortgage-tests
#           mortgage-streams-tests ecg-tests demo-tests all_to_all-tests transfer-bench
#           shuffle-bench join-bench
#           the applications' (benchmarks/examples/): mortgage-stages-bench
#           mortgage-timeline-bench mortgage-bench etl-ceiling-bench wall-clock-bench ecg-bench
#           ecg-train-bench
#           (scripts/scaling.sh runs the multi-GPU ones with every GPU)
# What each benchmark section measures, and its current results file: benchmarks/README.md.
# Extra arguments by environment: MEMORY_TESTS_K (pytest -k), MEMORY_BENCH_SECTIONS,
# VS_DASK_CUDA_ARGS, TRANSFER_ARGS, SHUFFLE_ARGS, JOIN_ARGS, MORTGAGE_ARGS, MORTGAGE_STAGES_ARGS,
# ETL_CEILING_ARGS, WALL_CLOCK_ARGS, ECG_ARGS, ECG_TRAIN_ARGS;
# MORTGAGE_DATA: where the mortgage benchmarks generate their datasets (default
# /tmp/mortgage-bench), MORTGAGE_STAGES_SIZE: the stages' dataset per layout (default 10GB).
# On this project's lent machines the RAPIDS stack comes from ../shared/gpukit (see its README):
# `source .gpukit/install.sh` first. Logs and results go to $OUT (default /tmp/gpu-check):
# log.txt, summary.md and results.tar.gz (benchmark tables, junit files).
# Leaves NVLink multicast settings (NCCL_NVLS_ENABLE and friends) as the machine sets them.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT/results"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/log.txt"
SUMMARY="$OUT/summary.md"
: > "$LOG"
printf '| section | status | seconds | result |\n| --- | --- | --- | --- |\n' > "$SUMMARY"

PYTEST=(python3 -m pytest -q -p no:cacheprovider -o addopts= -rs)

section() {  # name timeout command...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "===== $name: $*" | tee -a "$LOG"
  if declare -F "$1" > /dev/null; then
    "$@" > "$OUT/$name.part" 2>&1
  else
    timeout --kill-after=20 "$limit" "$@" > "$OUT/$name.part" 2>&1
  fi
  local rc=$?
  cat "$OUT/$name.part" >> "$LOG"
  local last
  last=$(grep -E "passed|failed|error|skipped" "$OUT/$name.part" | tail -n 1 | cut -c1-120)
  [ -n "$last" ] || last=$(tail -n 1 "$OUT/$name.part" | cut -c1-120)
  rm -f "$OUT/$name.part"
  local status=ok
  [ $rc -eq 0 ] || status="rc=$rc"
  [ $rc -eq 124 ] && status="timeout"
  [ $rc -eq 5 ] && status="no gpu tests"  # pytest: nothing selected
  printf '| %s | %s | %d | %s |\n' "$name" "$status" $((SECONDS - start)) "${last//|//}" >> "$SUMMARY"
}

probe() {
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv
  python3 - <<'PY'
import importlib
for name in ("numpy", "pandas", "dask", "distributed", "dask_cuda", "rmm", "cudf", "cupy", "numba",
             "numba.cuda", "torch", "xgboost", "jax", "ucxx", "distributed_ucxx"):
    try:
        module = importlib.import_module(name)
        print(f"{name:18} {getattr(module, '__version__', 'ok')}")
    except Exception as err:
        print(f"{name:18} MISSING ({type(err).__name__}: {str(err)[:80]})")
try:
    import xgboost
    print("xgboost config:", xgboost.get_config())
    print("xgboost build USE_RMM:", xgboost.build_info().get("USE_RMM"))
except Exception as err:
    print("xgboost:", err)
from dask_gpu_interop import device
print("gpus:", device.gpu_count(), device.current_device())
PY
}

want() {  # the section was asked for (or none were), and its code exists
  local name=$1 path=$2
  [ -e "$path" ] || return 1
  [ ${#SECTIONS[@]} -eq 0 ] && return 0
  local s; for s in "${SECTIONS[@]}"; do [ "$s" = "$name" ] && return 0; done
  return 1
}

bytecode() {  # as pip does at install: compile what has no bytecode (the stack, this checkout)
  # The folders come from Python; compileall runs as a command of its own, whose worker
  # processes can start (a script read from standard input cannot be imported by them).
  local folders
  mapfile -t folders < <(python3 - <<'PY'
import os, sys
from dask_gpu_interop.doctor import without_bytecode
missing = without_bytecode()
print("without bytecode:", ", ".join(missing) or "nothing", "; may write it:",
      not sys.dont_write_bytecode, file=sys.stderr)
ours = {os.path.abspath(d) for d in ("dask_gpu_interop", "examples", "benchmarks", "tests")}
print("\n".join(sorted({os.path.dirname(folder) for folder in missing.values()} | ours)))
PY
)
  python3 -m compileall -q -j 0 "${folders[@]}" > /dev/null && python3 - <<'PY'
from dask_gpu_interop.doctor import without_bytecode
left = without_bytecode()
print("without bytecode after compiling:", ", ".join(left) or "nothing")
raise SystemExit(1 if left else 0)
PY
}

SECTIONS=("$@")
want probe scripts && section probe 120 probe
# Always: the timings are a pip-installed machine's, whatever the GPU machine's packages came with.
section bytecode 600 bytecode
want memory-tests tests/test_memory_gpu.py && section memory-tests 600 "${PYTEST[@]}" tests/test_memory_gpu.py ${MEMORY_TESTS_K:+-k "$MEMORY_TESTS_K"} --junitxml="$OUT/results/memory-tests.xml"
want memory-bench benchmarks/memory.py && section memory-bench 600 python3 -m benchmarks.memory --out "$OUT/results" --sections "${MEMORY_BENCH_SECTIONS:-alloc,torch,peak,setup}"
want cupy-allocators-bench benchmarks/cupy_allocators.py && section cupy-allocators-bench 300 python3 -m benchmarks.cupy_allocators --out "$OUT/results"
eval "vs_args=(${VS_DASK_CUDA_ARGS:-})"  # shell words: --configs 'plugin async;...' keeps its quotes
want vs-dask-cuda-bench benchmarks/vs_dask_cuda.py && section vs-dask-cuda-bench 900 python3 -m benchmarks.vs_dask_cuda --out "$OUT/results" "${vs_args[@]}"
want cluster-start-bench benchmarks/cluster_start.py && section cluster-start-bench 600 python3 -m benchmarks.cluster_start --out "$OUT/results"
for name in compat cluster worker serialize convert mortgage ecg demo all_to_all; do
  files=$(ls tests/test_${name}*.py tests/${name}/test_*.py tests/examples/test_${name}*.py 2>/dev/null | tr '\n' ' ')
  [ -n "$files" ] && want $name-tests tests && section $name-tests 600 "${PYTEST[@]}" -m "gpu or multi_gpu" $files --junitxml="$OUT/results/$name-tests.xml"
done
# The mortgage GPU tests again with the local GPU workers' per-thread streams (two tasks at once
# on one device must still give the CPU's table).
want mortgage-streams-tests tests/examples/test_mortgage_gpu.py && section mortgage-streams-tests 600 env CUDF_PER_THREAD_STREAM=1 CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 "${PYTEST[@]}" -m "gpu and not slow" tests/examples/test_mortgage_gpu.py --junitxml="$OUT/results/mortgage-streams-tests.xml"

mortgage_dataset() {  # DIR LAYOUT SIZE: generated once, then shared by the mortgage sections
  [ -d "$1" ] || python3 -m examples.mortgage generate --out "$1" --size "$3" --layout "$2"
}
mortgage_stages() {  # each layout's partition step by step, with and without the workers' settings
  local data=${MORTGAGE_DATA:-/tmp/mortgage-bench} size=${MORTGAGE_STAGES_SIZE:-10GB} layout
  for layout in classic current; do
    mortgage_dataset "$data/$layout-$size" "$layout" "$size" || return 1
    python3 -m benchmarks.examples.mortgage_stages --data "$data/$layout-$size" --out "$OUT/results" --partitions 6 --streams per-thread --io-threads 8 --tag workers ${MORTGAGE_STAGES_ARGS:-} || return 1
    python3 -m benchmarks.examples.mortgage_stages --data "$data/$layout-$size" --out "$OUT/results" --partitions 6 --tag defaults ${MORTGAGE_STAGES_ARGS:-} || return 1
  done
}
want mortgage-stages-bench benchmarks/examples/mortgage_stages.py && section mortgage-stages-bench 900 mortgage_stages
mortgage_timeline() {  # the etl command's tasks over time, first and warm ETL, on the stages' data
  local data=${MORTGAGE_DATA:-/tmp/mortgage-bench} size=${MORTGAGE_STAGES_SIZE:-10GB} layout args=()
  for layout in classic current; do
    mortgage_dataset "$data/$layout-$size" "$layout" "$size" || return 1
    args+=(--data "$data/$layout-$size")
  done
  python3 -m benchmarks.examples.mortgage_timeline "${args[@]}" --warm --out "$OUT/results"
}
want mortgage-timeline-bench benchmarks/examples/mortgage_timeline.py && section mortgage-timeline-bench 600 mortgage_timeline
want transfer-bench benchmarks/transfer.py && section transfer-bench 600 python3 -m benchmarks.transfer --out "$OUT/results" ${TRANSFER_ARGS:-}
want shuffle-bench benchmarks/shuffle.py && section shuffle-bench 600 python3 -m benchmarks.shuffle --out "$OUT/results" ${SHUFFLE_ARGS:-}
want join-bench benchmarks/join.py && section join-bench 600 python3 -m benchmarks.join --out "$OUT/results" ${JOIN_ARGS:-}
want mortgage-bench benchmarks/examples/mortgage.py && section mortgage-bench 3000 python3 -m benchmarks.examples.mortgage --data "${MORTGAGE_DATA:-/tmp/mortgage-bench}" --out "$OUT/results" ${MORTGAGE_ARGS:-}
want etl-ceiling-bench benchmarks/examples/etl_ceiling.py && section etl-ceiling-bench 900 python3 -m benchmarks.examples.etl_ceiling --data "${MORTGAGE_DATA:-/tmp/mortgage-bench}" --out "$OUT/results" ${ETL_CEILING_ARGS:-}
want wall-clock-bench benchmarks/examples/wall_clock.py && section wall-clock-bench 900 python3 -m benchmarks.examples.wall_clock --data "${MORTGAGE_DATA:-/tmp/mortgage-bench}" --out "$OUT/results" ${WALL_CLOCK_ARGS:-}
want ecg-bench benchmarks/examples/ecg.py && section ecg-bench 600 python3 -m benchmarks.examples.ecg --out "$OUT/results" ${ECG_ARGS:-}
want ecg-train-bench benchmarks/examples/ecg_train.py && section ecg-train-bench 600 python3 -m benchmarks.examples.ecg_train --out "$OUT/results" ${ECG_TRAIN_ARGS:-}

tar -czf "$OUT/results.tar.gz" -C "$OUT" results && rm -rf "$OUT/results"
cat "$SUMMARY"
