#!/usr/bin/env bash
# Scaling on every GPU of this machine (issue 7), from the checkout's root; a short table last.
#
#   scripts/scaling.sh [SECTION...]    (default: transfer-bench shuffle-bench join-bench
#                                       mortgage-bench)
#
# The same script on 1, 2, 4 or 8 GPUs: only the number of GPUs changes (SCALING_GPUS, default
# every GPU nvidia-smi lists). SCALING_DRY_RUN=1 prints what would run.
#   mortgage-bench  the mortgage example's ETL command on 1, 2, 4, ... GPU workers, on
#                   SCALING_SIZE (default 50GB) generated into SCALING_DATA (default
#                   /tmp/mortgage-scaling) by the example's generate command, reused when there
#   transfer-bench  CuPy and torch between every ordered pair of GPUs over UCX, and the raw peer
#                   copies (each link alone, and all at once)
#   shuffle-bench   the library's shuffle against dask's task and p2p shuffles of cuDF frames
#                   of SCALING_SHUFFLE_SIZES (default 64MiB,1GiB,4GiB) per GPU, UCX and TCP,
#                   against the peer copies
#   join-bench      performance rows joined to acquisition rows on loan_id, the library's
#                   shuffle_merge against dask's merge, SCALING_JOIN_SIZES (default
#                   256MiB,2GiB) of performance rows per GPU, UCX
# Results: $OUT/results.tar.gz (transfer-<N>x<GPU>-pairs, shuffle-<N>x<GPU>, join-<N>x<GPU>,
# mortgage-<N>x<GPU>-scaling; .md and .json). Sections run through scripts/gpu-check.sh, which
# leaves NVLink multicast settings as the machine sets them.
set -u
cd "$(dirname "$0")/.."
GPUS=${SCALING_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ "${GPUS:-0}" -lt 1 ]; then
  echo "scaling.sh: no GPU visible (nvidia-smi -L lists none); set SCALING_GPUS on a GPU machine" >&2
  exit 2
fi
MODEL=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | sed 's/NVIDIA //' | awk '{print $1}')
NAME="${GPUS}x${MODEL:-gpu}"
if [ -z "${CUDA_VISIBLE_DEVICES:-}" ]; then
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((GPUS - 1)))
  export CUDA_VISIBLE_DEVICES
fi

CONFIGS=""
n=1
while [ $n -le "$GPUS" ]; do CONFIGS="${CONFIGS:+$CONFIGS,}$n"; last=$n; n=$((n * 2)); done
[ "$last" -eq "$GPUS" ] || CONFIGS="$CONFIGS,$GPUS"

export MORTGAGE_DATA=${SCALING_DATA:-/tmp/mortgage-scaling}
export TRANSFER_ARGS="--pairs all --kinds cupy,torch --sizes 64MiB,1GiB --protocols ucx --repeats 5 --machine $NAME-pairs"
export SHUFFLE_ARGS="--sizes ${SCALING_SHUFFLE_SIZES:-64MiB,1GiB,4GiB} --protocols ucx,tcp --machine $NAME"
export JOIN_ARGS="--sizes ${SCALING_JOIN_SIZES:-256MiB,2GiB} --protocols ucx --machine $NAME"
export MORTGAGE_ARGS="--data $MORTGAGE_DATA --size ${SCALING_SIZE:-50GB} --layouts classic --gpu-workers $CONFIGS --runs 2 --cpu-runs 0 --e2e-size none --machine $NAME-scaling"

if [ -n "${SCALING_DRY_RUN:-}" ]; then  # what would run, and nothing else
  echo "NAME=$NAME"; echo "CONFIGS=$CONFIGS"
  echo "TRANSFER_ARGS=$TRANSFER_ARGS"; echo "SHUFFLE_ARGS=$SHUFFLE_ARGS"; echo "JOIN_ARGS=$JOIN_ARGS"
  echo "MORTGAGE_ARGS=$MORTGAGE_ARGS"
  exit 0
fi
if [ $# -eq 0 ]; then
  set -- transfer-bench shuffle-bench join-bench mortgage-bench
fi
echo "scaling on $NAME: $CONFIGS; sections: $*"
exec scripts/gpu-check.sh "$@"
