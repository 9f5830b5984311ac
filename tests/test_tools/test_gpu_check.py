"""tools/analysis/gpu_check.py: without CUDA it says so; its code runs on CPU."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'analysis' / 'gpu_check.py'
_spec = importlib.util.spec_from_file_location('gpu_check', SCRIPT)
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


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
