#!/usr/bin/env bash
# Install mmsoft and its pinned OpenMMLab stack into the active Python.
#
# Usage: bash tools/setup.sh [--wheelhouse DIR]... [--find-links URL]... [--no-tests]
#
#   --wheelhouse DIR   a folder of prebuilt wheels (pip --find-links); mmcv is
#                      taken from it when it holds mmcv 2.1.0. Repeatable.
#   --find-links URL   any other pip --find-links source, e.g. OpenMMLab's wheel
#                      index for your torch/CUDA pair. Repeatable.
#   --no-tests         skip the test requirements (pytest, ruff, scikit-learn, ...).
#
# Environment: PYTHON (default: python3), TORCH_PACKAGES (default:
# "torch==2.14.1 torchvision==0.29.1", installed only when torch or torchvision
# is missing), MMCV_BUILD_DIR (default: a temporary folder).
#
# Safe to run again: every step checks first and skips what is already there.
#
# Example: bash tools/setup.sh --wheelhouse ~/wheels
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH_PACKAGES="${TORCH_PACKAGES:-torch==2.14.1 torchvision==0.29.1}"
MMCV_VERSION="2.1.0"
FIND_LINKS=()
WITH_TESTS=1

die() { echo "setup.sh: error: $*" >&2; exit 1; }
say() { echo "setup.sh: $*"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --wheelhouse)
            [ $# -ge 2 ] || die "--wheelhouse needs a folder"
            if [ -d "$2" ]; then FIND_LINKS+=(--find-links "$(cd "$2" && pwd)")
            else say "wheelhouse '$2' does not exist; ignoring it"; fi
            shift 2 ;;
        --find-links)
            [ $# -ge 2 ] || die "--find-links needs a URL or folder"
            FIND_LINKS+=(--find-links "$2"); shift 2 ;;
        --no-tests) WITH_TESTS=0; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found: install Python 3.8+ or set PYTHON=/path/to/python"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "pip is missing for $PYTHON: run '$PYTHON -m ensurepip --upgrade'"
PIP=("$PYTHON" -m pip install --disable-pip-version-check)

# Checks run outside the repo so that the checkout itself never counts as installed.
py_ok() { (cd / && "$PYTHON" -c "$1" >/dev/null 2>&1); }

# 1. torch, only when missing.
if py_ok "import torch, torchvision"; then
    say "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') already installed"
else
    say "installing $TORCH_PACKAGES"
    # shellcheck disable=SC2086
    "${PIP[@]}" "${FIND_LINKS[@]}" $TORCH_PACKAGES
fi

# 2. mmcv with its compiled ops: a wheel when one is found, else a source build.
mmcv_ok() { py_ok "import mmcv, mmcv.ops; assert mmcv.__version__ == '$MMCV_VERSION'"; }
build_mmcv() {
    command -v g++ >/dev/null || die "building mmcv needs a C++ compiler: install g++ (Debian: apt-get install g++) or pass --wheelhouse with an mmcv $MMCV_VERSION wheel"
    "$PYTHON" - <<'PY' || die "building mmcv needs the Python headers (Python.h): install python3-dev (Debian: apt-get install python3-dev) or pass --wheelhouse with an mmcv wheel"
import os, sysconfig
assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))
PY
    local work="${MMCV_BUILD_DIR:-$(mktemp -d)}"
    say "building mmcv $MMCV_VERSION from source in $work (about 25 minutes on 2 cores)"
    "${PIP[@]}" "setuptools<70" wheel ninja
    "$PYTHON" -m pip download --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$work" "mmcv==$MMCV_VERSION"
    tar -xzf "$work/mmcv-$MMCV_VERSION.tar.gz" -C "$work"
    local src="$work/mmcv-$MMCV_VERSION"
    # torch >= 2.10 headers need C++20; mmcv 2.1.0 asks for C++17.
    if "$PYTHON" - <<'PY'
import torch
major, minor = (int(x) for x in torch.__version__.split('+')[0].split('.')[:2])
raise SystemExit(0 if (major, minor) >= (2, 10) else 1)
PY
    then
        say "raising mmcv's C++ standard to c++20 for this torch"
        sed -i 's/-std=c++17/-std=c++20/g' "$src/setup.py"
    fi
    (cd "$src" && MMCV_WITH_OPS=1 "${PIP[@]}" --no-build-isolation --no-deps .) \
        || die "mmcv build failed (see above); a prebuilt wheel avoids it: --wheelhouse DIR or --find-links URL"
}
if mmcv_ok; then
    say "mmcv $MMCV_VERSION with ops already installed"
else
    if [ ${#FIND_LINKS[@]} -gt 0 ] && "${PIP[@]}" --only-binary mmcv "${FIND_LINKS[@]}" "mmcv==$MMCV_VERSION"; then
        say "installed mmcv $MMCV_VERSION from a wheel"
    else
        build_mmcv
    fi
    mmcv_ok || die "mmcv $MMCV_VERSION is installed but 'import mmcv.ops' fails: its compiled ops do not match this torch; rebuild it (remove it with 'pip uninstall mmcv' and run this script again)"
fi

# 3. The OpenMMLab toolboxes, ONNX export and runtime, test tools and mmsoft
#    itself (editable).
REQS=(-r "$REPO/requirements/runtime.txt" -r "$REPO/requirements/dense.txt"
      -r "$REPO/requirements/deployment.txt")
[ "$WITH_TESTS" = 1 ] && REQS+=(-r "$REPO/requirements/tests.txt")
"${PIP[@]}" --quiet "${FIND_LINKS[@]}" "${REQS[@]}"
py_ok "import mmsoft, os; assert os.path.samefile(os.path.dirname(mmsoft.__file__), '$REPO/mmsoft')" \
    || "${PIP[@]}" --no-deps --no-build-isolation -e "$REPO"

(cd / && "$PYTHON" -c "import mmsoft, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models") \
    || die "the stack does not import; see the traceback above"
say "done: $(cd / && "$PYTHON" -c 'import mmsoft; print("mmsoft", mmsoft.__version__)') on the pinned stack"
