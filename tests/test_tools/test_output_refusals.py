"""Every tool that writes a file the user names refuses a bad destination
before its work: the config, checkpoint or image named beside it does not
exist here, so a tool that started its work would fail on those instead (a
benchmark would run). The checks themselves are in test_output_paths.py."""
import os
import re
from pathlib import Path

import pytest
from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]


def refusal(tool: str, *argv, capsys) -> str:
    """Run ``tools/<tool>``'s main in this process; the message it stopped with."""
    module = load_tool(REPO / 'tools' / tool)
    try:
        status = module.main([str(a) for a in argv])
    except SystemExit as stop:
        status = stop.code
    except ValueError as error:  # visualize_predictions raises its errors
        return str(error)
    assert status not in (0, None)
    return status if isinstance(status, str) else capsys.readouterr().err


def made(path: Path, kind: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == 'fifo':
        os.mkfifo(path)
    else:
        path.write_bytes(b'mine')
    return path


CASES = {
    'pytorch2onnx, existing --out': (
        'deployment/pytorch2onnx.py',
        lambda t: ['no_such.py', '--shape', 224, 224, '--out', made(t / 'm.onnx', 'file')],
        r'error: .*m\.onnx exists; pass --force to replace it'),
    'pytorch2onnx, FIFO as --out': (
        'deployment/pytorch2onnx.py',
        lambda t: ['no_such.py', '--shape', 224, 224, '--force', '--out',
                   made(t / 'm.onnx', 'fifo')],
        r'm\.onnx is a FIFO \(named pipe\), not a regular file'),
    'pytorch2onnx, folder as --out': (
        'deployment/pytorch2onnx.py',
        lambda t: ['no_such.py', '--shape', 224, 224, '--out', t],
        r'is a folder; name the file to write, e.g. .*/no_such\.onnx'),
    'soft2mmsoft, FIFO as DST': (
        'model_converters/soft2mmsoft.py',
        lambda t: [t / 'no_such.pth', made(t / 'out.pth', 'fifo'), '--force'],
        r'out\.pth is a FIFO \(named pipe\), not a regular file'),
    'visualize_attention, existing --out': (
        'analysis/visualize_attention.py',
        lambda t: ['no_such.py', 'no_such.png', '--out', made(t / 'a.png', 'file')],
        r'a\.png exists; pass --force'),
    'visualize_predictions, existing PNG': (
        'analysis/visualize_predictions.py',
        lambda t: ['no_such.py', 'no_such.pth', 'x/00003.png', '--out-prefix',
                   f'{made(t / "p_00003.png", "file").parent}/p_'],
        r'p_00003\.png exists; pass --force'),
    'visualize_predictions, two images of one name': (
        'analysis/visualize_predictions.py',
        lambda t: ['no_such.py', 'no_such.pth', 'a/1.png', 'b/1.png', '--out-prefix',
                   f'{t}/'],
        r'a/1\.png and b/1\.png would both be drawn to .*/1\.png'),
    'benchmark, existing summary': (
        'analysis/benchmark.py',
        lambda t: ['--out-dir', made(t / 'summary.txt', 'file').parent],
        r'summary\.txt exists; pass --force'),
    'benchmark_detection, FIFO as the CSV': (
        'analysis/benchmark_detection.py',
        lambda t: ['--force', '--out-dir', made(t / 'detection.csv', 'fifo').parent],
        r'detection\.csv is a FIFO'),
    'benchmark_under_load, file as --out-dir': (
        'analysis/benchmark_under_load.py',
        lambda t: ['--out-dir', made(t / 'out', 'file')],
        r'Cannot write .*/out/load\.csv: .*/out is not a folder'),
    'compare_mixers, existing table': (
        'analysis/compare_mixers.py',
        lambda t: ['--out-dir', made(t / 'runs.csv', 'file').parent],
        r'runs\.csv exists; pass --force'),
    'prepare_digits, FIFO as OUT_DIR': (
        'dataset_converters/prepare_digits.py',
        lambda t: [made(t / 'digits', 'fifo')],
        r'digits is a FIFO \(named pipe\), not a folder'),
    'prepare_digits, folder of other files': (
        'dataset_converters/prepare_digits.py',
        lambda t: [made(t / 'data' / 'notes.txt', 'file').parent],
        r'data is not empty and does not hold the digits dataset'),
    'prepare_digit_scenes, file as OUT_DIR': (
        'dataset_converters/prepare_digit_scenes.py',
        lambda t: [made(t / 'scenes', 'file')],
        r'scenes is a file, not a folder'),
}


@pytest.mark.parametrize('case', list(CASES))
def test_a_bad_destination_is_refused_before_the_work(case, tmp_path, capsys):
    tool, argv, message = CASES[case]
    args = argv(tmp_path)
    before = sorted(tmp_path.rglob('*'))
    stopped_with = refusal(tool, *args, capsys=capsys)
    assert re.search(message, stopped_with), stopped_with
    assert sorted(tmp_path.rglob('*')) == before  # nothing written, nothing made
