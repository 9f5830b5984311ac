"""Which route evaluates the Newton iterate, chosen by measurement per machine.

Routes (:data:`~.execution.NEWTON_ROUTES`): ``'loop'``, the ``2 T`` matrix
products of the iteration (the export path and the GPU route); ``'eigh'`` and
``'tridiagonal'``, one spectral decomposition per matrix
(:mod:`.newton_spectral`). All compute the same function up to float
rounding. Which is fastest differs between CPUs and their LAPACK (MKL's
``eigh`` in torch against OpenBLAS's tridiagonal reduction in SciPy), so on
CPU the ``'auto'`` setting measures it, once per machine and per size class
of ``m`` (powers of two from :data:`MIN_MEASURED`): the first matrix of a
class that a forward meets is decomposed by each candidate on one thread,
:data:`ROUNDS` times round-robin, and the fastest median wins. Below
:data:`MIN_MEASURED` landmarks the loop always runs (a handful of small
products); the loop is not a candidate from :data:`LOOP_MAX` on (it does
``2 T m^3 / (4/3 m^3)``, about 30 times, the work of a reduction).

The choices are cached in ``newton_routes.json`` in :func:`cache_dir`
(``$MMSOFT_CACHE_DIR``, else ``$XDG_CACHE_HOME/mmsoft``, else
``~/.cache/mmsoft``), under a key naming the CPU (model, family, flags) and
the versions of torch and SciPy, so another machine or library measures
anew; an unwritable folder only costs the measurement per process.
``MMSOFT_NEWTON_ROUTE`` (or :func:`~.execution.use_newton_route`) forces a
route. :func:`route_report` says what runs and why.
"""
import json
import logging
import os
import platform
import statistics
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

import torch
from torch import Tensor

from . import lapack
from .execution import exporting, newton_route
from .gaussian_kernel import gaussian_kernel

MIN_MEASURED = 64
"""Smallest ``m`` whose route is measured; smaller matrices take the loop."""
LOOP_MAX = 512
"""From this ``m`` on the loop is not measured (it cannot win on a CPU)."""
ROUNDS = 3
"""Timed rounds per candidate (after one untimed warm-up round)."""
DEFAULT_SPECTRAL = 'eigh'
"""The spectral route asked for by ``use_eig=True`` where the measured
choice is the loop (too few landmarks)."""

logger = logging.getLogger(__name__)
_LOCK = threading.Lock()
_TABLE: Optional[Dict[str, dict]] = None  # this machine's entries, by size class


def cache_dir() -> str:
    """The folder of mmsoft's per-machine measurements (created on write)."""
    if os.environ.get('MMSOFT_CACHE_DIR'):
        return os.environ['MMSOFT_CACHE_DIR']
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
        os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'mmsoft')


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
    """What the cached choices depend on: CPU and library versions."""
    info = cpu_info()
    flags = info.get('flags', '').split()
    simd = ' '.join(f for f in flags if f.startswith(('avx', 'fma', 'amx')))
    try:
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


def _cache_file() -> str:
    return os.path.join(cache_dir(), 'newton_routes.json')


def _read_cache() -> Dict[str, dict]:
    try:
        with open(_cache_file()) as f:
            entries = json.load(f).get(machine_key(), {})
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def _write_cache(table: Dict[str, dict]) -> None:
    """Merge this machine's table into the cache file (atomic rename)."""
    path = _cache_file()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path) as f:
                data = json.load(f)
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        data[machine_key()] = table
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.newton_routes.')
        with os.fdopen(fd, 'w') as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as err:
        logger.warning(f'mmsoft: could not cache Newton routes in {path}: {err}')


def _table() -> Dict[str, dict]:
    global _TABLE
    if _TABLE is None:
        _TABLE = _read_cache()
    return _TABLE


def forget_measurements() -> None:
    """Drop this process's measurements (the cache file is left as it is)."""
    global _TABLE
    with _LOCK:
        _TABLE = None


def spectral_routes() -> List[str]:
    """The spectral routes that can run here."""
    return ['eigh'] + (['tridiagonal'] if lapack.available() else [])


def choose_route(a: Tensor) -> str:
    """The route :func:`~.inverse.newton_apply` takes for matrices ``a``.

    ``'loop'`` off the CPU, while exporting and below :data:`MIN_MEASURED`
    landmarks; a forced route (:func:`~.execution.newton_route`) wherever it
    can run; else the cached or newly measured choice for ``a``'s size class.
    Under ``torch.compile`` the choice is made once, while tracing, and kept
    as a constant of the graph.

    Args:
        a (Tensor): The matrices ``(..., m, m)``.

    Returns:
        str: ``'loop'``, ``'eigh'`` or ``'tridiagonal'``.
    """
    if a.device.type != 'cpu' or exporting():
        return 'loop'
    return _cpu_route(a.shape[-1])


@torch.compiler.assume_constant_result
def _cpu_route(m: int) -> str:
    """:func:`choose_route` for ``m x m`` CPU matrices (runs eagerly, also
    while ``torch.compile`` traces)."""
    setting = newton_route()
    if setting != 'auto':
        if setting == 'tridiagonal' and not lapack.available():
            raise RuntimeError("MMSOFT_NEWTON_ROUTE='tridiagonal' needs LAPACK through "
                               f'SciPy: {lapack.unavailable_reason()}.')
        return setting
    if m < MIN_MEASURED:
        return 'loop'
    key = str(size_class(m))
    usable = ['loop'] + spectral_routes()
    entry = _table().get(key)
    if entry is None or entry.get('route') not in usable:
        with _LOCK:
            entry = _table().get(key)
            if entry is None or entry.get('route') not in usable:
                entry = measure(m)
                _table()[key] = entry
                _write_cache(_table())
    return entry['route']


def measure(m: int, rounds: int = ROUNDS) -> dict:
    """Time each candidate route on an ``m x m`` landmark kernel (one thread).

    The matrix is the Gaussian kernel of ``m`` random points in 32
    dimensions, scaled as SOFT scales its queries and spread like the
    landmarks of a natural image's first stage (its largest row sum is about
    ``0.4 m``), so its spectrum neither collapses nor is flat; its values
    are fixed, so a measurement never depends on the input a forward meets.

    Args:
        m (int): The size.
        rounds (int): Timed rounds. Defaults to :data:`ROUNDS`.

    Returns:
        dict: ``route`` (the fastest), ``m`` and ``ms`` (each candidate's
        median in milliseconds).
    """
    from .inverse import newton_apply  # the routes' user; imported late
    gen = torch.Generator().manual_seed(0)
    points = torch.randn(m, 32, generator=gen) * 32**-0.25 * 0.5
    a = gaussian_kernel(points, points)[None]
    rhs = torch.randn(1, m, 32, generator=gen)
    candidates = spectral_routes() + (['loop'] if m < LOOP_MAX else [])

    def timer(route: str) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            newton_apply(a, rhs, route=route)
            return time.perf_counter() - start
        return run

    timers = {route: timer(route) for route in candidates}
    times: Dict[str, List[float]] = {route: [] for route in candidates}
    from .thread_split import map_single_threaded
    start = time.perf_counter()
    for round_ in range(rounds + 1):
        for route, run in timers.items():
            # Alone on a single-threaded worker, as the routes run in a forward.
            elapsed = map_single_threaded(lambda _, run=run: run(), [0],
                                          on_worker=True)[0]
            if round_:
                times[route].append(elapsed)
    ms = {route: round(statistics.median(t) * 1e3, 2) for route, t in times.items()}
    route = min(ms, key=ms.get)
    logger.info(f'mmsoft: Newton route for m ~ {m} measured in '
                f'{time.perf_counter() - start:.1f} s: {ms} ms, {route!r} chosen.')
    return dict(route=route, m=m, ms=ms)


def route_report() -> Dict[str, str]:
    """What decides the Newton route here, name to value (for
    ``python -m mmsoft.utils.collect_env`` and the benchmarks)."""
    setting = newton_route()
    reason = lapack.unavailable_reason()
    report = {
        'Newton route': setting + (' (MMSOFT_NEWTON_ROUTE)' if setting != 'auto'
                                   else ' (measured per machine)'),
        'Newton spectral routes': ', '.join(spectral_routes())
        + (f' (tridiagonal: {reason})' if reason else ''),
        'Newton route cache': _cache_file(),
    }
    for key, entry in sorted(_table().items(), key=lambda kv: int(kv[0])):
        low = 1 << int(key)
        times = ', '.join(f'{r} {ms} ms' for r, ms in entry.get('ms', {}).items())
        report[f'Newton route m {low}-{2 * low - 1}'] = (
            f'{entry.get("route")} ({times} at m = {entry.get("m")})')
    if not _table():
        report['Newton route by size'] = (f'loop below m = {MIN_MEASURED}; larger '
                                          'sizes measured at their first forward')
    return report


def format_route_report() -> str:
    """:func:`route_report` on one line."""
    return '; '.join(f'{k}: {v}' for k, v in route_report().items())
