"""Versions mmsoft runs with; printed by ``python -m mmsoft.utils.collect_env``."""
from importlib import metadata
from typing import Dict

from mmengine.utils.dl_utils import collect_env as collect_base_env

from mmsoft.ops.dispatch import setting_report
from mmsoft.ops.fast.route_choice import cpu_info, report

_PACKAGES = {
    'MMCV': 'mmcv',
    'MMEngine': 'mmengine',
    'MMPretrain': 'mmpretrain',
    'MMDetection': 'mmdet',
    'MMSegmentation': 'mmsegmentation',
    'NumPy': 'numpy',
    'mmsoft': 'mmsoft',
}


def _mmcv_ops_status() -> str:
    """Whether mmcv's compiled ops load, with the reason when they do not."""
    try:
        from mmcv.ops import nms  # noqa: F401
    except Exception as err:  # any failure here is worth reporting, not raising
        return f'not available ({type(err).__name__}: {err})'
    return 'available'


def collect_env() -> Dict[str, str]:
    """Collect the environment: Python, torch, compiler, CUDA and package versions.

    Package versions come from their installed metadata, so mmdet and mmseg
    are reported without being imported.

    Returns:
        dict: Name to version or status, in a stable order.

    Examples:
        >>> from mmsoft.utils import collect_env
        >>> info = collect_env()
        >>> 'PyTorch' in info and 'MMCV ops' in info
        True
    """
    info = dict(collect_base_env())
    for name, dist in _PACKAGES.items():
        try:
            info[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[name] = 'not installed'
    info['MMCV ops'] = _mmcv_ops_status()
    info['CPU'] = cpu_model()
    info.update(route_report())
    return {key: str(value) for key, value in info.items()}


def route_report() -> Dict[str, str]:
    """What decides the Newton route here: the setting, the registered routes
    and the ``'auto'`` setting's choices by size class (kept or measured in
    this process)."""
    return {**setting_report(), **report()}


def format_route_report() -> str:
    """:func:`route_report` on one line (the benchmarks print it)."""
    return '; '.join(f'{k}: {v}' for k, v in route_report().items())


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (as lscpu prints it), or the
    platform's processor string where there is none.

    Every timing table prints it: speed ratios differ between CPU families.
    """
    return cpu_info()['model name']


def main() -> None:
    """Print :func:`collect_env` one ``name: value`` per line."""
    for name, value in collect_env().items():
        print(f'{name}: {value}')

