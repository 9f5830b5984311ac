"""tools/analysis/benchmark_authors.py needs a checkout of the authors' code,
which this project does not ship: without one it says what to pass."""
from pathlib import Path

import pytest
from helpers.tools import load_tool

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'analysis' / 'benchmark_authors.py'


def test_a_folder_without_the_authors_models_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_tool(TOOL).parse_args(['--authors-repo', str(tmp_path)])
    err = capsys.readouterr().err
    assert f'--authors-repo {tmp_path}: no softmax_free_transformer.py' in err
    assert 'github.com/fudan-zvg/SOFT' in err
