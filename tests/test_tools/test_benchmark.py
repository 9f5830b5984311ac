"""tools/analysis/benchmark.py runs its smallest configurations end to end."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(out_dir, *args):
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools/analysis/benchmark.py'), '--suite',
         'attention', '--repeats', '1', '--out-dir', str(out_dir), *args],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out_dir / 'benchmark.csv') as f:
        return list(csv.DictReader(f))


def test_benchmark_writes_csv_plot_and_summary(tmp_path):
    rows = run_benchmark(tmp_path, '--sizes', '64', '128', '--variants', 'soft',
                         'soft-reference', 'soft-capped', 'softmax-sdpa', 'performer')
    assert len(rows) == 10
    assert {'variant', 'tokens', 'forward_s', 'fwd_bwd_s'} <= set(rows[0])
    assert all(float(r['forward_s']) > 0 and float(r['fwd_bwd_s']) > 0 for r in rows)
    assert (tmp_path / 'benchmark.png').stat().st_size > 0
    summary = (tmp_path / 'summary.txt').read_text()
    assert 'GFLOP/s' in summary and 'soft-capped: log-log slope' in summary


def test_benchmark_measures_memory(tmp_path):
    rows = run_benchmark(tmp_path, '--sizes', '128', '--variants', 'soft-chunked',
                         '--memory', '--threads', '1')
    assert len(rows) == 1 and float(rows[0]['fwd_bwd_mib']) >= 0
