"""What a process looks like from outside mmsoft, compared before and after.

:data:`SNAPSHOT` defines ``snapshot()`` in a fresh interpreter: mmengine's
file backends and checkpoint loaders, every root registry's names, torch's
weights-only allow-list and thread count. :func:`run_python` runs code after
it and returns the last line the code printed.
"""
import os
import subprocess
import sys
import textwrap

SNAPSHOT = textwrap.dedent("""
    import json, sys
    import torch
    import mmengine.registry as registries
    from mmengine.fileio.backends import registry_utils as backends
    from mmengine.registry import Registry
    from mmengine.runner.checkpoint import CheckpointLoader

    def snapshot():
        roots = {name: sorted(r.module_dict) for name, r in vars(registries).items()
                 if isinstance(r, Registry)}
        return dict(
            backends={k: repr(v) for k, v in backends.backends.items()},
            prefixes={k: repr(v) for k, v in backends.prefix_to_backends.items()},
            loaders={k: repr(v) for k, v in CheckpointLoader._schemes.items()},
            roots=roots,
            safe_globals=sorted(map(repr, torch.serialization.get_safe_globals())),
            threads=torch.get_num_threads())
""")


def run_python(code: str, **env) -> str:
    """Run ``code`` after :data:`SNAPSHOT` in a fresh interpreter.

    Args:
        code (str): Python code (dedented here); it can call ``snapshot()``.
        **env: Environment variables to set for the run.

    Returns:
        str: The last line the code printed; the test fails if it raised.
    """
    result = subprocess.run([sys.executable, '-c', SNAPSHOT + textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]
