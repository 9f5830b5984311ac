# Argument checks shared by tools/{dist,slurm}_{train,test}.sh (sourced).

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
