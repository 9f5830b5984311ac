"""tools/analysis/benchmark.py runs its smallest configurations end to end."""
import csv
import subprocess
import sys
from pathlib import Path

from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(out_dir, *args, suite='attention'):
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools/analysis/benchmark.py'), '--suite',
         suite, '--repeats', '1', '--out-dir', str(out_dir), *args],
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


def test_backbone_suite_runs_peers_over_sizes(tmp_path):
    rows = run_benchmark(tmp_path, '--sizes', '64', '96', '--batch', '1',
                         '--variants', 'soft', 'soft-reference', 'performer',
                         suite='backbone')
    assert [(r['variant'], r['size'], r['tokens']) for r in rows] == [
        ('tiny soft', '64', '256'), ('tiny soft-reference', '64', '256'),
        ('tiny performer', '64', '256'), ('tiny soft', '96', '576'),
        ('tiny soft-reference', '96', '576'), ('tiny performer', '96', '576')]
    assert all(float(r['fwd_bwd_img_s']) > 0 for r in rows)
    summary = (tmp_path / 'summary.txt').read_text()
    assert 'SOFT-tiny 64 batch' in summary and 'SOFT-tiny 96 batch' in summary
    assert 'backbone tiny performer: log-log slope' in summary
    assert (tmp_path / 'benchmark.png').stat().st_size > 0


def benchmark_tool():
    return load_tool(REPO / 'tools/analysis/benchmark.py', 'benchmark_tool')


def test_backbone_suite_pairs_each_size_with_its_reference():
    tool = benchmark_tool()
    args = tool.parse_args(['--suite', 'backbone', '--archs', 'tiny', 'small'])
    specs = tool.backbone_specs(args)
    assert [s['variant'] for s in specs] == [
        'tiny soft', 'tiny soft-reference', 'small soft', 'small soft-reference']
    rows = [dict(kind='backbone', variant=s['variant'], size=224, tokens=3136,
                 forward_img_s=f, fwd_bwd_img_s=f / 3)
            for s, f in zip(specs, (30.0, 20.0, 15.0, 12.0))]
    summary = '\n'.join(tool.summarise(rows, 100.0))
    assert 'SOFT-tiny 224 batch: forward 30.0 img/s (1.50x reference)' in summary
    assert 'SOFT-small 224 batch: forward 15.0 img/s (1.25x reference)' in summary


def test_suites_skip_quadratic_attentions_above_the_token_limit():
    tool = benchmark_tool()
    args = tool.parse_args(['--suite', 'backbone', '--sizes', '224', '512',
                            '--variants', 'soft', 'softmax-sdpa',
                            '--max-quadratic-tokens', '4096'])
    assert [(s['variant'], s['size']) for s in tool.backbone_specs(args)] == [
        ('tiny soft', 224), ('tiny softmax-sdpa', 224), ('tiny soft', 512)]
    assert [s['size'] for s in tool.attention_specs(args)] == [224, 224, 512]
    defaults = tool.parse_args([])
    assert {s['size'] for s in tool.backbone_specs(defaults)} == {224}
    assert len(tool.attention_specs(defaults)) == 4 * 12 - 2 * 2


def test_unknown_variant_is_refused_with_the_choices():
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools/analysis/benchmark.py'), '--variants',
         'sofmax'], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "invalid choice: 'sofmax'" in result.stderr and 'softmax-sdpa' in result.stderr
