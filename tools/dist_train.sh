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
. "$(dirname "$0")/lib/launcher.sh"
check_usage 2 "$@"
run_torchrun "$2" "$(dirname "$0")/train.py" "$1" --launcher pytorch "${@:3}"
