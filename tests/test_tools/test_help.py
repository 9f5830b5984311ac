"""Every tool answers --help with its usage and an example, without side effects
(``tools/lib/`` holds code the tools share, not tools)."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_TOOLS = sorted(str(p.relative_to(REPO)) for p in REPO.glob('tools/**/*.py')
                      if p.name != '__init__.py' and p.parent.name != 'lib')
SHELL_TOOLS = sorted(str(p.relative_to(REPO)) for p in REPO.glob('tools/*.sh'))


@pytest.mark.parametrize('tool', PYTHON_TOOLS + SHELL_TOOLS)
def test_help_has_an_example(tool):
    command = ['bash', tool] if tool.endswith('.sh') else [sys.executable, tool]
    result = subprocess.run([*command, '--help'], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'example' in result.stdout.lower(), result.stdout
    assert 'set -euo' not in result.stdout  # only the comment header is shown
