# The body shared by tools/{dist,slurm}_{train,test}.sh (sourced): each script
# sets USAGE, checks its arguments with check_usage, and hands its tool and
# the tool's arguments to run_torchrun or run_srun. "$0" stays the script
# that sources this file: --help prints its header, messages name it, and
# paths are taken from its folder.

# check_usage MIN "$@": -h/--help prints the calling script's header comment
# (lines 2 to the first line that is not a comment) and exits 0; fewer than
# MIN arguments print USAGE and exit 2.
check_usage() {
    local min=$1
    shift
    if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0
    fi
    if [ $# -lt "$min" ]; then
        echo "$USAGE" >&2
        exit 2
    fi
}

# require_count NAME VALUE MIN USAGE: exit 2 with the usage unless VALUE is a
# whole number of at least MIN.
require_count() {
    if ! [[ "$2" =~ ^(0|[1-9][0-9]*)$ ]] || [ "$2" -lt "$3" ]; then
        echo "$(basename "$0"): $1 must be a whole number >= $3, got '$2'." >&2
        echo "$4" >&2
        exit 2
    fi
}

# check_cluster_env USAGE: exit 2 with the usage unless the torchrun settings
# taken from the environment (NNODES, NODE_RANK, PORT) are valid.
check_cluster_env() {
    require_count NNODES "$NNODES" 1 "$1"
    require_count NODE_RANK "$NODE_RANK" 0 "$1"
    require_count PORT "$PORT" 1 "$1"
    if [ "$NODE_RANK" -ge "$NNODES" ]; then
        echo "$(basename "$0"): NODE_RANK ($NODE_RANK) must be below NNODES ($NNODES)." >&2
        exit 2
    fi
}

# run_torchrun GPUS TOOL [TOOL ARGS...]: replace this shell with torchrun
# starting GPUS processes of TOOL on this node (NNODES, NODE_RANK,
# MASTER_ADDR and PORT from the environment). torchrun keeps this shell's
# pid, which the workers get as MMSOFT_LAUNCHER_PID (see
# tools/lib/follow_launcher.py).
run_torchrun() {
    local gpus=$1
    shift
    NNODES=${NNODES:-1}
    NODE_RANK=${NODE_RANK:-0}
    PORT=${PORT:-29500}
    MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
    require_count GPUS "$gpus" 1 "$USAGE"
    check_cluster_env "$USAGE"
    # CPU runs: one intra-op thread pool per process, not one per core each.
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / gpus > 0 ? $(nproc) / gpus : 1 ))}
    export MMSOFT_LAUNCHER_PID=$$
    PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}" \
    exec python -m torch.distributed.run \
        --nnodes="$NNODES" \
        --node_rank="$NODE_RANK" \
        --master_addr="$MASTER_ADDR" \
        --nproc_per_node="$gpus" \
        --master_port="$PORT" \
        "$@"
}

# run_srun PARTITION JOB_NAME TOOL [TOOL ARGS...]: srun starting GPUS tasks of
# TOOL (GPUS, GPUS_PER_NODE, CPUS_PER_TASK and SRUN_ARGS from the environment).
run_srun() {
    local partition=$1 job_name=$2
    shift 2
    GPUS=${GPUS:-8}
    GPUS_PER_NODE=${GPUS_PER_NODE:-8}
    CPUS_PER_TASK=${CPUS_PER_TASK:-5}
    SRUN_ARGS=${SRUN_ARGS:-""}
    require_count GPUS "$GPUS" 1 "$USAGE"
    require_count GPUS_PER_NODE "$GPUS_PER_NODE" 1 "$USAGE"
    require_count CPUS_PER_TASK "$CPUS_PER_TASK" 1 "$USAGE"
    # shellcheck disable=SC2086
    PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}" \
    srun -p "$partition" \
        --job-name="$job_name" \
        --gres=gpu:"$GPUS_PER_NODE" \
        --ntasks="$GPUS" \
        --ntasks-per-node="$GPUS_PER_NODE" \
        --cpus-per-task="$CPUS_PER_TASK" \
        --kill-on-bad-exit=1 \
        $SRUN_ARGS \
        python -u "$@"
}
