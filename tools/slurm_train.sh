#!/usr/bin/env bash
# Training on a Slurm cluster, one task per GPU.
#   [GPUS=16 GPUS_PER_NODE=8 CPUS_PER_TASK=5 SRUN_ARGS=...] \
#       tools/slurm_train.sh PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py args...]
# Example: GPUS=16 tools/slurm_train.sh dev soft-tiny configs/soft_tiny_imagenet.py
set -euo pipefail
USAGE="usage: $0 PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py args...]"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
fi
if [ $# -lt 3 ]; then
    echo "$USAGE" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
shift 3
WORK_DIR_ARGS=()
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then
    WORK_DIR_ARGS=(--work-dir "$1")
    shift
fi
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}

. "$(dirname "$0")/lib/launcher_args.sh"
require_count GPUS "$GPUS" 1 "$USAGE"
require_count GPUS_PER_NODE "$GPUS_PER_NODE" 1 "$USAGE"
require_count CPUS_PER_TASK "$CPUS_PER_TASK" 1 "$USAGE"

# shellcheck disable=SC2086
PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    $SRUN_ARGS \
    python -u "$(dirname "$0")/train.py" "$CONFIG" "${WORK_DIR_ARGS[@]}" \
    --launcher slurm "$@"
