#!/usr/bin/env bash
# Evaluation on a Slurm cluster, one task per GPU.
#   [GPUS=8 GPUS_PER_NODE=8 CPUS_PER_TASK=5 SRUN_ARGS=...] \
#       tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]
# Example: tools/slurm_test.sh dev soft-tiny configs/soft_tiny_imagenet.py soft_tiny.pth
set -euo pipefail
USAGE="usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]"
. "$(dirname "$0")/lib/launcher.sh"
check_usage 4 "$@"
run_srun "$1" "$2" "$(dirname "$0")/test.py" "$3" "$4" --launcher slurm "${@:5}"
