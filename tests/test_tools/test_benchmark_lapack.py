"""tools/analysis/benchmark_lapack.py times the binding against SciPy's
wrappers and the split solve with and without SciPy's BLAS on one thread."""
from pathlib import Path

from helpers.tools import load_tool

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'analysis' / 'benchmark_lapack.py'


def test_a_small_run_prints_every_case(capsys):
    rows = load_tool(TOOL).main(['--sizes', '70', '--repeats', '1', '--heads', '2'])
    cases = [r['case'] for r in rows]
    for routine in ('?sytrd', '?stemr (16 eigenpairs)'):
        for way in ('binding', 'scipy.linalg.lapack'):
            assert f'{routine}, {way}' in cases
            assert f'{routine}, {way}, two threads at once' in cases
    solves = [r for r in rows if r['case'].startswith('tridiagonal solve')]
    assert len(solves) == 2 and all(r['same'] == 'yes' for r in solves)
    assert all(r['ms'] > 0 for r in rows)
    out = capsys.readouterr().out
    assert out.count('| 70 |') == len(rows) and 'CPU: ' in out
