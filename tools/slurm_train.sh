#!/usr/bin/env bash
# Training on a Slurm cluster, one task per GPU.
#   [GPUS=16 GPUS_PER_NODE=8 CPUS_PER_TASK=5 SRUN_ARGS=...] \
#       tools/slurm_train.sh PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py args...]
# Example: GPUS=16 tools/slurm_train.sh dev soft-tiny configs/soft_tiny_imagenet.py
set -euo pipefail
USAGE="usage: $0 PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py args...]"
. "$(dirname "$0")/lib/launcher.sh"
check_usage 3 "$@"
WORK_DIR_ARGS=()
if [ $# -gt 3 ] && [[ "$4" != --* ]]; then
    WORK_DIR_ARGS=(--work-dir "$4")
    set -- "${@:1:3}" "${@:5}"
fi
run_srun "$1" "$2" "$(dirname "$0")/train.py" "$3" "${WORK_DIR_ARGS[@]}" \
    --launcher slurm "${@:4}"
