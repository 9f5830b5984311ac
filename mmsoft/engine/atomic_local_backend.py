"""Local file writes that never leave a half-written checkpoint behind."""
import os
import os.path as osp
import tempfile
from pathlib import Path
from typing import Union

import mmengine
from mmengine.fileio.backends import LocalBackend, register_backend


class AtomicLocalBackend(LocalBackend):
    """mmengine's local backend, writing to a temporary file and renaming it.

    A run killed while saving leaves the previous file (or none) in place,
    never a truncated checkpoint under the final name. Registered for local
    paths when mmsoft is imported, so every mmengine Runner saves this way.

    Examples:
        >>> import os.path as osp
        >>> import tempfile
        >>> from mmsoft.engine import AtomicLocalBackend
        >>> path = osp.join(tempfile.mkdtemp(), 'epoch_1.pth')
        >>> AtomicLocalBackend().put(b'weights', path)
        >>> open(path, 'rb').read()
        b'weights'
    """

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        """Write ``obj`` to ``filepath`` atomically."""
        self._atomic_write(obj, filepath, 'wb')

    def put_text(self, obj: str, filepath: Union[str, Path],
                 encoding: str = 'utf-8') -> None:
        """Write text ``obj`` to ``filepath`` atomically."""
        self._atomic_write(obj.encode(encoding), filepath, 'wb')

    @staticmethod
    def _atomic_write(data: bytes, filepath: Union[str, Path], mode: str) -> None:
        folder = osp.dirname(osp.abspath(filepath))
        mmengine.mkdir_or_exist(folder)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{osp.basename(filepath)}.')
        try:
            with os.fdopen(fd, mode) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, filepath)
        except BaseException:
            if osp.exists(tmp):
                os.remove(tmp)
            raise


register_backend('local', AtomicLocalBackend, force=True, prefixes='')
