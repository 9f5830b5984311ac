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
