#!/usr/bin/env bash
# Distributed evaluation with torchrun (GPUs, or CPU processes with gloo).
#   tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args...]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR and PORT as for dist_train.sh.
# Example: tools/dist_test.sh configs/soft_tiny_imagenet.py soft_tiny.pth 8
set -euo pipefail
USAGE="usage: $0 CONFIG CHECKPOINT GPUS [test.py args...]"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
fi
if [ $# -lt 3 ]; then
    echo "$USAGE" >&2
    exit 2
fi
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
shift 3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}

. "$(dirname "$0")/lib/launcher_args.sh"
require_count GPUS "$GPUS" 1 "$USAGE"
check_cluster_env "$USAGE"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / GPUS > 0 ? $(nproc) / GPUS : 1 ))}

PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}" \
exec python -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$(dirname "$0")/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "$@"
