#!/usr/bin/env bash
# Distributed training with torchrun: one process per GPU, or per CPU slot
# on a machine without GPUs (gloo).
#   tools/dist_train.sh CONFIG GPUS [train.py args...]
# Multi-node: NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 tools/dist_train.sh ...
# Example: tools/dist_train.sh configs/soft_tiny_imagenet.py 8 --amp
# SIGTERM or SIGINT to this script ends every worker (torchrun forwards the
# signal, waits 30 s, then kills); workers also stop when it is SIGKILLed.
set -euo pipefail
USAGE="usage: $0 CONFIG GPUS [train.py args...]"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
fi
if [ $# -lt 2 ]; then
    echo "$USAGE" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}

. "$(dirname "$0")/lib/launcher_args.sh"
require_count GPUS "$GPUS" 1 "$USAGE"
check_cluster_env "$USAGE"
# CPU runs: one intra-op thread pool per process, not one per core each.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / GPUS > 0 ? $(nproc) / GPUS : 1 ))}

PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}" \
exec python -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$(dirname "$0")/train.py" \
    "$CONFIG" \
    --launcher pytorch "$@"
