"""Which Newton route the ``'auto'`` setting takes on CPU, chosen by measurement.

All routes compute the same function; which is fastest differs between
CPUs and their LAPACK (MKL's ``eigh`` in torch against OpenBLAS's
tridiagonal reduction in SciPy). As ``torch.backends.cudnn.benchmark`` does,
the first ``m x m`` matrix of each size class (powers of two from
:data:`MIN_MEASURED`) that a process meets on CPU is timed by each candidate
route on one worker thread, :data:`ROUNDS` times round-robin after a
warm-up, and the fastest median is kept **in memory for the process**.
Below :data:`MIN_MEASURED` landmarks, and off the CPU, the loop runs; the
loop is no candidate from :data:`LOOP_MAX` on (it does about 30 times the
work of a reduction).

Nothing is written by a forward. A table kept on disk is read where the user
made one, with ``python tools/analysis/newton_routes.py`` (which measures,
re-measures, resets and prints it): ``newton_routes.json`` in
:func:`cache_dir`, under a key naming the CPU and the versions of torch and
SciPy. An entry is used only when it is well formed and plausible
(:func:`entry_problem`); any other is ignored with a one-line warning naming
the file, and the size class is measured anew for the process.
"""
import contextlib
import fcntl
import json
import math
import os
import platform
import stat
import statistics
import tempfile
import threading
import time
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ..dispatch import registered_routes
from ..gaussian_kernel import gaussian_kernel
from ..newton import initial_scale
from .threads import map_single_threaded

MIN_MEASURED = 64
"""Smallest ``m`` whose route is measured; smaller matrices take the loop."""
LOOP_MAX = 512
"""From this ``m`` on the loop is not measured (it cannot win on a CPU)."""
ROUNDS = 3
"""Timed rounds per candidate (after one untimed warm-up round)."""
BUSY_LOADED = 0.25
"""Share of the CPUs used by other processes from which a measurement is
reported as taken on a loaded machine."""
CACHE_ENV = 'MMSOFT_CACHE_DIR'
CACHE_FILE = 'newton_routes.json'


# ------------------------------------------------------------- the machine
def cpu_info() -> Dict[str, str]:
    """The CPU's ``model name``, ``vendor_id``, ``cpu family``, ``model``,
    ``stepping`` and ``flags`` from ``/proc/cpuinfo`` (its first processor);
    the platform's processor string as ``model name`` where there is none."""
    fields = ('model name', 'vendor_id', 'cpu family', 'model', 'stepping', 'flags')
    info: Dict[str, str] = {}
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(':')
                if key.strip() in fields:
                    info[key.strip()] = value.strip()
    except OSError:
        pass
    info.setdefault('model name', platform.processor() or 'unknown CPU')
    return info


def machine_key() -> str:
    """What a kept choice depends on: CPU and library versions."""
    info = cpu_info()
    flags = info.get('flags', '').split()
    simd = ' '.join(f for f in flags if f.startswith(('avx', 'fma', 'amx')))
    try:  # SciPy is optional here: without it the tridiagonal route says why
        import scipy
        scipy_version = scipy.__version__
    except ImportError:
        scipy_version = 'none'
    return ' | '.join([
        info['model name'], info.get('vendor_id', '?'),
        f"family {info.get('cpu family', '?')} model {info.get('model', '?')} "
        f"stepping {info.get('stepping', '?')}", simd,
        f'torch {torch.__version__}', f'scipy {scipy_version}'])


def size_class(m: int) -> int:
    """The measured class of ``m``: ``floor(log2(m))``."""
    return max(m, 1).bit_length() - 1


def candidates(m: int) -> List[str]:
    """The routes timed for ``m x m`` CPU matrices: every registered route
    that runs on the CPU, the loop only below :data:`LOOP_MAX`."""
    return [name for name, route in registered_routes().items()
            if not route.unable('cpu', False) and (name != 'loop' or m < LOOP_MAX)]


# ----------------------------------------------------------- measurement
def landmark_kernel_of_size(m: int, spread: float = 0.5) -> torch.Tensor:
    """A fixed ``(1, m, m)`` float32 landmark kernel: the Gaussian kernel of
    ``m`` random points in 32 dimensions, scaled as SOFT scales its queries;
    with ``spread`` 0.5 spread like the landmarks of a natural image's first
    stage (its largest row sum is about ``0.4 m``), so its spectrum neither
    collapses nor is flat."""
    gen = torch.Generator().manual_seed(0)
    points = torch.randn(m, 32, generator=gen) * 32**-0.25 * spread
    return gaussian_kernel(points, points)[None]


def time_routes(m: int, routes: List[str], rounds: int = ROUNDS, reg: float = 0.01,
                backoff: bool = False, grad: bool = False,
                spread: float = 0.5) -> Dict[str, float]:
    """Median milliseconds of each route on :func:`landmark_kernel_of_size`,
    applied to 32 columns, on one worker thread as a forward runs it;
    round-robin, after one untimed round.

    Args:
        m (int): The size.
        routes (list[str]): Registered route names.
        rounds (int): Timed rounds. Defaults to :data:`ROUNDS`.
        reg (float): Ridge. Defaults to 0.01.
        backoff (bool): The released back-off start. Defaults to False.
        grad (bool): Time what a training step does (the factors, then two
            applications) instead of the solve. Defaults to False.
        spread (float): Of the landmarks. Defaults to 0.5.

    Returns:
        dict: Route to milliseconds.
    """
    a3 = landmark_kernel_of_size(m, spread)
    rhs3 = torch.randn(1, m, 32, generator=torch.Generator().manual_seed(1))
    alpha3 = initial_scale(a3, reg, backoff)
    table = registered_routes()

    def timer(name: str) -> Callable[[object], float]:
        route = table[name]

        def run(_) -> float:
            start = time.perf_counter()
            if grad:
                factors = route.factorize(a3, alpha3, reg, 20)
                route.apply(factors, rhs3)
                route.apply(factors, rhs3)
            else:
                route.solve(a3, rhs3, alpha3, reg, 20)
            return time.perf_counter() - start
        return run

    times: Dict[str, List[float]] = {name: [] for name in routes}
    for round_ in range(rounds + 1):
        for name in routes:
            elapsed = map_single_threaded(timer(name), [0], on_worker=True)[0]
            if round_:
                times[name].append(elapsed)
    return {name: round(statistics.median(t) * 1e3, 3) for name, t in times.items()}


def measure(m: int, rounds: int = ROUNDS) -> dict:
    """Time each of :func:`candidates` on an ``m x m`` landmark kernel
    (:func:`time_routes`, the ridge start, no backward); its values are
    fixed, so a measurement never depends on the input a forward meets.

    Args:
        m (int): The size.
        rounds (int): Timed rounds. Defaults to :data:`ROUNDS`.

    Returns:
        dict: ``route`` (the fastest), ``m``, ``ms`` (each candidate's median
        in milliseconds), ``busy`` (the share of all CPUs that other
        processes used meanwhile, None where ``/proc/stat`` is missing) and
        ``when`` (the time, ISO 8601).
    """
    before = _cpu_seconds()
    ms = time_routes(m, candidates(m), rounds)
    return dict(route=min(ms, key=ms.get), m=m, ms=ms, busy=_others_busy(before),
                when=time.strftime('%Y-%m-%dT%H:%M:%S'))


def _cpu_seconds() -> Optional[Tuple[float, float, float]]:
    """``(wall, all processes' busy CPU seconds, this process's)``, or None
    where ``/proc/stat`` cannot be read."""
    try:
        with open('/proc/stat') as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    own = os.times()
    return time.monotonic(), (sum(fields[:8]) - idle) / tick, own.user + own.system


def _others_busy(before) -> Optional[float]:
    """The share of all CPUs that other processes kept busy since ``before``
    (:func:`_cpu_seconds`), rounded to a percent."""
    after = _cpu_seconds()
    if before is None or after is None or after[0] <= before[0]:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    share = others / ((after[0] - before[0]) * (os.cpu_count() or 1))
    return round(min(max(share, 0.0), 1.0), 2)


def entry_problem(key: str, entry: object) -> str:
    """Why a kept entry for size class ``key`` cannot be used here (``''``
    when it can): it must be a dict whose ``m`` lies in the class (from
    :data:`MIN_MEASURED` on), whose ``ms`` times every one of
    :func:`candidates` (positive and finite) and whose ``route`` is the
    fastest of them."""
    if not (isinstance(key, str) and key.isdigit()):
        return f'size class {key!r} is not a power of two exponent'
    if not isinstance(entry, dict):
        return f'the entry is a {type(entry).__name__}, not a table'
    m, ms, route = entry.get('m'), entry.get('ms'), entry.get('route')
    if not isinstance(m, int) or isinstance(m, bool) or size_class(m) != int(key) \
            or m < MIN_MEASURED:
        return f'm={m!r} is not a size of class {key} (from {MIN_MEASURED} on)'
    if not isinstance(ms, dict) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool)
            and math.isfinite(t) and t > 0 for t in ms.values()):
        return f'its times {ms!r} are not positive numbers by route'
    if set(ms) != set(candidates(m)):
        return (f'it timed {sorted(ms)}, not the routes that run here, '
                f'{sorted(candidates(m))}')
    if route != min(ms, key=ms.get):
        return f'route {route!r} is not the fastest of its times {ms}'
    return ''


# ----------------------------------------------------------- the kept table
def cache_dir() -> str:
    """The folder of the kept table: ``$MMSOFT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/mmsoft``, else ``~/.cache/mmsoft`` (``~`` expanded)."""
    if os.environ.get(CACHE_ENV):
        return os.path.expanduser(os.environ[CACHE_ENV])
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join('~', '.cache')
    return os.path.join(os.path.expanduser(base), 'mmsoft')


def cache_file() -> str:
    """The kept table's path."""
    return os.path.join(cache_dir(), CACHE_FILE)


def _read_file(path: str) -> dict:
    """The kept tables of every machine in ``path`` (``{}`` where there is no
    file). Raises ValueError naming the problem for anything but a regular
    file holding a JSON object; only a regular file is ever opened."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return {}
    if not stat.S_ISREG(mode):
        raise ValueError('it is not a regular file')
    # Non-blocking: a FIFO put in the file's place between the two checks
    # is refused by the second instead of blocking the open.
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK)) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError('it is not a regular file')
        try:
            data = json.load(f)
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(f'it is not JSON ({err})') from None
    if not isinstance(data, dict):
        raise ValueError(f'it holds a {type(data).__name__}, not a JSON object')
    return data


def read_kept() -> Tuple[Dict[str, dict], Dict[str, str]]:
    """This machine's usable entries of the kept table, and the problems
    found (size class, or ``'file'``, to reason); never raises."""
    path = cache_file()
    try:
        table = _read_file(path).get(machine_key(), {})
    except (OSError, ValueError) as err:
        return {}, {'file': str(err)}
    if not isinstance(table, dict):
        return {}, {'file': f"this machine's table is a {type(table).__name__}"}
    usable, problems = {}, {}
    for key, entry in table.items():
        problem = entry_problem(key, entry)
        if problem:
            problems[key] = problem
        else:
            usable[key] = entry
    return usable, problems


def _merge_into_file(update: Callable[[Dict[str, dict]], Dict[str, dict]]) -> str:
    """Rewrite the kept table: ``update`` gets this machine's entries as the
    file holds them now and returns the new ones. Writers hold a lock on the
    folder and re-read under it, so concurrent writers merge by size class;
    the file is replaced in one rename and no temporary file is left.
    Returns the path."""
    path = cache_file()
    folder = os.path.dirname(path)
    if os.path.lexists(path) and not os.path.isfile(path):
        raise ValueError(f'{path} exists and is not a regular file; remove it first.')
    os.makedirs(folder, exist_ok=True)
    lock = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = _read_file(path)
        except ValueError:
            data = {}  # damaged: rewritten whole
        own = data.get(machine_key())
        data[machine_key()] = update(own if isinstance(own, dict) else {})
        fd, tmp = tempfile.mkstemp(dir=folder, prefix='.' + CACHE_FILE + '.')
        try:
            with os.fdopen(fd, 'w') as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    finally:
        os.close(lock)  # releases the lock
    return path


def keep(entries: Dict[str, dict]) -> str:
    """Write ``entries`` (size class to :func:`measure`'s result) into the
    kept table, leaving its other size classes as they are; returns the path."""
    return _merge_into_file(lambda own: {**own, **entries})


def reset() -> str:
    """Remove this machine's entries from the kept table; returns the path."""
    return _merge_into_file(lambda own: {})


# ------------------------------------------------------- the process choice
class _Choices:
    """This process's choices by size class (a forked child starts its own)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.table: Dict[str, dict] = {}
        self.origin: Dict[str, str] = {}
        self.kept: Optional[Dict[str, dict]] = None
        self.warned = False


_CHOICES = _Choices()


def _choices() -> _Choices:
    global _CHOICES
    if _CHOICES.pid != os.getpid():
        _CHOICES = _Choices()
    return _CHOICES


def forget_measurements() -> None:
    """Drop this process's choices and its reading of the kept table."""
    global _CHOICES
    _CHOICES = _Choices()


def _kept(choices: _Choices) -> Dict[str, dict]:
    """The kept table's usable entries, read once per process; its problems
    are warned about once, in one line naming the file."""
    if choices.kept is None:
        choices.kept, problems = read_kept()
        if problems and not choices.warned:
            choices.warned = True
            what = '; '.join(f'{k}: {v}' for k, v in problems.items())
            warnings.warn(
                f'mmsoft: ignoring Newton route entries in {cache_file()} ({what}); '
                'their sizes are measured for this process. '
                '`python tools/analysis/newton_routes.py --remeasure` rewrites '
                'them.', RuntimeWarning, stacklevel=2)
    return choices.kept


def choose(device_type: str, m: int) -> str:
    """The route of the ``'auto'`` setting for ``m x m`` matrices on
    ``device_type``: the loop off the CPU and below :data:`MIN_MEASURED`,
    else this process's choice for ``m``'s size class (from the kept table,
    or measured now on ``m`` itself)."""
    if device_type != 'cpu' or m < MIN_MEASURED:
        return 'loop'
    choices, key = _choices(), str(size_class(m))
    entry = choices.table.get(key)
    if entry is None:
        with choices.lock:
            entry = choices.table.get(key)
            if entry is None:
                entry = _kept(choices).get(key)
                choices.origin[key] = 'kept' if entry else 'measured in this process'
                choices.table[key] = entry = entry or measure(m)
    return entry['route']


def describe_load(entry: dict) -> str:
    """``'; other processes used 85% of the CPUs (loaded)'`` for an entry
    measured with :data:`BUSY_LOADED` or more of the CPUs busy elsewhere,
    else the share without the mark; ``''`` where it is unknown."""
    busy = entry.get('busy')
    if not isinstance(busy, (int, float)) or isinstance(busy, bool):
        return ''
    mark = ' (loaded: measure again on an idle machine)' if busy >= BUSY_LOADED else ''
    return f'; other processes used {busy:.0%} of the CPUs{mark}'


def report() -> Dict[str, str]:
    """What decides the ``'auto'`` route here, name to value (for
    ``python -m mmsoft.utils.collect_env`` and the benchmarks); never raises."""
    out = {'Newton route table': cache_file()}
    usable, problems = read_kept()
    for key, problem in problems.items():
        out[f'Newton route table problem ({key})'] = problem + ' (ignored)'
    choices = _choices()
    rows = {**{k: (v, 'kept') for k, v in usable.items()},
            **{k: (v, choices.origin[k]) for k, v in choices.table.items()}}
    for key, (entry, origin) in sorted(rows.items(), key=lambda kv: int(kv[0])):
        low = 1 << int(key)
        times = ', '.join(f'{r} {ms} ms' for r, ms in entry['ms'].items())
        out[f'Newton route m {low}-{2 * low - 1}'] = (
            f"{entry['route']} ({times} at m = {entry['m']}; {origin}"
            f'{describe_load(entry)})')
    if not rows:
        out['Newton route by size'] = (f'loop below m = {MIN_MEASURED}; larger sizes '
                                       'measured at their first forward')
    return out
