#!/usr/bin/env bash
# Distributed evaluation with torchrun (GPUs, or CPU processes with gloo).
#   tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args...]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR and PORT as for dist_train.sh.
# Example: tools/dist_test.sh configs/soft_tiny_imagenet.py soft_tiny.pth 8
set -euo pipefail
USAGE="usage: $0 CONFIG CHECKPOINT GPUS [test.py args...]"
. "$(dirname "$0")/lib/launcher.sh"
check_usage 3 "$@"
run_torchrun "$3" "$(dirname "$0")/test.py" "$1" "$2" --launcher pytorch "${@:4}"
