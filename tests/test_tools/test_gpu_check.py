"""tools/analysis/gpu_check.py: without CUDA it says so; its code runs on CPU."""
from pathlib import Path

from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'analysis' / 'gpu_check.py'
tool = load_tool(SCRIPT)


def test_without_cuda_it_stops_with_a_clear_message(capsys, monkeypatch):
    monkeypatch.setattr(tool.torch.cuda, 'is_available', lambda: False)
    assert tool.main([]) == 2
    assert 'No CUDA device' in capsys.readouterr().err


def test_the_dry_run_on_cpu_prints_every_table_and_passes(capsys):
    assert tool.main(['--device', 'cpu', '--quick']) == 0
    out = capsys.readouterr().out
    for line in ('| SOFT-Norm-Tiny backoff |', '| bfloat16 | 1 |',
                 '| 128 x 192, batch 1 | PVT-Tiny |', 'All checks passed.'):
        assert line in out
