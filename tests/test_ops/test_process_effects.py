"""A forward changes nothing outside itself that another thread could see,
except the one documented window (SciPy's BLAS count while split LAPACK work
runs), which the work-split switch turns off."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

# A fresh process runs SOFT-Norm attention on a 20 x 20 grid with 100
# landmarks (a spectral route can run; small tiles, so the kernel products
# are split too) while another thread keeps reading every thread count it
# can see.
WATCH = textwrap.dedent("""
    import contextlib, ctypes, json, os, sys, threading
    import torch
    from threadpoolctl import ThreadpoolController
    from mmsoft.models import SOFTAttention
    from mmsoft.ops import use_newton_route
    from mmsoft.ops.dispatch import route_name_for

    route, mode = sys.argv[1], sys.argv[2]
    torch_lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), 'lib',
                                         'libtorch_cpu.so'))
    mkl = getattr(torch_lib, 'MKL_Get_Max_Threads', None)
    model = SOFTAttention(64, 2, sr_ratio=2, normalize=True)
    x = torch.randn(2, 400, 64)
    import scipy.linalg  # SciPy's BLAS is loaded before the first reading
    libraries = ThreadpoolController().lib_controllers

    def counts():
        seen = {'torch': torch.get_num_threads(),
                'mkl': mkl() if mkl is not None else None}
        for lib in libraries:
            seen[f'{lib.internal_api} {os.path.basename(lib.filepath)}'] = (
                lib.num_threads)
        return seen

    readings, stop = [], threading.Event()

    def watch():
        readings.append(counts())
        while not stop.wait(0.002):
            readings.append(counts())

    watcher = threading.Thread(target=watch)
    before_threads = {t.name for t in threading.enumerate()}
    watcher.start()
    if mode == 'train':
        model.train()
        context = contextlib.nullcontext()
    else:
        model.eval()
        context = torch.no_grad()
    forced = use_newton_route(route) if route != 'auto' else contextlib.nullcontext()
    with forced, context:
        chosen = route_name_for('cpu', 100, False)
        for _ in range(2):
            out = model(x, (20, 20))
            if mode == 'train':
                out.sum().backward()
    stop.set()
    watcher.join()
    new_threads = {t.name for t in threading.enumerate()} - before_threads
    window = [f'{c.internal_api} {os.path.basename(c.filepath)}' for c in libraries
              if hasattr(c.dynlib, 'scipy_ssytrd_')]
    print(json.dumps(dict(before=readings[0], after=counts(), during=readings,
                          threads=sorted(new_threads), window=window,
                          route=chosen)))
""")


def watch(route, mode, **env):
    out = subprocess.run([sys.executable, '-c', WATCH, route, mode],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, 'OMP_NUM_THREADS': '2',
                              'MMSOFT_TILE_ELEMENTS': '20000', **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def changed(result):
    """The counts that differed from the first reading in any reading."""
    before = result['before']
    return sorted({name for reading in result['during'] + [result['after']]
                   for name, count in reading.items() if count != before[name]})


@pytest.mark.parametrize('route,mode', [('auto', 'eval'), ('eigh', 'eval'),
                                        ('tridiagonal', 'eval'), ('tridiagonal', 'train')])
def test_a_forward_changes_no_thread_count_another_thread_sees(route, mode):
    result = watch(route, mode)
    assert len(result['during']) > 10  # the watcher read all along
    assert result['after'] == result['before']
    # The one window: SciPy's BLAS runs on one thread while split work runs
    # LAPACK: on the tridiagonal route, and while 'auto' times it.
    if route == 'auto':
        assert set(changed(result)) <= set(result['window'])
    else:
        window = result['window'] if result['route'] == 'tridiagonal' else []
        assert changed(result) == sorted(window)
    assert all(name.startswith('mmsoft-split') for name in result['threads'])


def test_the_work_split_switch_closes_the_window():
    result = watch('tridiagonal', 'eval', MMSOFT_WORK_SPLIT='0')
    assert result['window'] and changed(result) == []
    assert result['threads'] == []
