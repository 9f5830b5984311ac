#!/usr/bin/env bash
# Evaluation on a Slurm cluster, one task per GPU.
#   [GPUS=8 GPUS_PER_NODE=8 CPUS_PER_TASK=5 SRUN_ARGS=...] \
#       tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]
# Example: tools/slurm_test.sh dev soft-tiny configs/soft_tiny_imagenet.py soft_tiny.pth
set -euo pipefail
USAGE="usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py args...]"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 0
fi
if [ $# -lt 4 ]; then
    echo "$USAGE" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
CHECKPOINT=$4
shift 4
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
    python -u "$(dirname "$0")/test.py" "$CONFIG" "$CHECKPOINT" \
    --launcher slurm "$@"
