"""The scripts in ``tools/`` imported as modules, whatever the working directory."""
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Optional


def load_tool(path: Path, name: Optional[str] = None) -> ModuleType:
    """Import the script at ``path`` as a new module (not put in ``sys.modules``).

    Args:
        path (Path): The script.
        name (str, optional): The module's name. Defaults to the file's stem.
    """
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
