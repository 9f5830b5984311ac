"""The checks a tool makes on the paths it will write, before any work.

Every tool under ``tools/`` that writes a file or a folder the user names
calls :func:`check_output_file` or :func:`check_output_folder` right after
reading its arguments, so that a bad destination is refused at once, with
the path as the user gave it, instead of after minutes of work with a raw
``PermissionError`` on a hidden temporary file. Nothing is opened or
created: a FIFO at the path would block an ``open``, and a device such as
``/dev/null`` would swallow the output (or, written aside and renamed over,
be replaced by a regular file).
"""
import os
import os.path as osp
import stat
from typing import Iterable, List, Optional, Union

PathLike = Union[str, 'os.PathLike[str]']

_KINDS = ((stat.S_ISDIR, 'a folder'), (stat.S_ISFIFO, 'a FIFO (named pipe)'),
          (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'),
          (stat.S_ISSOCK, 'a socket'))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)),
                'not a regular file')


def _stat(path: str) -> Optional[os.stat_result]:
    """``os.stat`` (through links), or None when nothing is there."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if osp.islink(path):
            raise ValueError(f'{path} is a link to {os.readlink(path)}, which does '
                             'not exist; remove the link or choose another name.'
                             ) from None
        return None


def _check_parent(path: str, make_folders: bool) -> None:
    """The folder ``path`` goes in exists (or, with ``make_folders``, can be
    made below the nearest one that does) and can be written."""
    folder = osp.dirname(path.rstrip(os.sep)) or os.curdir
    existing = folder
    if make_folders:
        while not osp.exists(existing) and not osp.islink(existing):
            existing = osp.dirname(existing) or os.curdir
    if not osp.isdir(existing):
        if osp.lexists(existing):
            raise ValueError(f'Cannot write {path}: {existing} is not a folder.')
        raise ValueError(f'Cannot write {path}: the folder {folder} does not exist; '
                         'create it first.')
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f'Cannot write {path}: the folder {existing} is not '
                         'writable.')


def check_output_file(path: PathLike, force: bool = False, make_folders: bool = False,
                      example: Optional[str] = None) -> str:
    """Refuse ``path`` as the destination of a file the caller is about to write.

    - Something at ``path`` that is not a regular file (a folder, a FIFO, a
      device such as ``/dev/null``, a socket, a broken link) is refused, with
      ``force`` too.
    - An existing regular file is refused unless ``force``; one that cannot
      be written is refused with ``force`` too.
    - The folder must exist and be writable; with ``make_folders`` (the
      caller creates missing folders) the nearest folder that exists must be.

    Links are followed: a link to a regular file is a regular file.

    Args:
        path (str | PathLike): The destination, as the user gave it; the
            messages name it so.
        force (bool): Replace an existing regular file. Defaults to False.
        make_folders (bool): The caller creates the missing folders of
            ``path``. Defaults to False.
        example (str, optional): A file name to suggest inside ``path`` when
            it is a folder. Defaults to None.

    Returns:
        str: ``path``, as a string.

    Raises:
        ValueError: ``path`` cannot take the file; the message says why and
            what to do.

    Examples:
        >>> import os.path as osp
        >>> import tempfile
        >>> from mmsoft.utils import check_output_file
        >>> folder = tempfile.mkdtemp()
        >>> out = osp.join(folder, 'model.onnx')
        >>> check_output_file(out) == out
        True
        >>> check_output_file(folder, example='model.onnx')  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ... is a folder; name the file to write, e.g. .../model.onnx.
    """
    path = os.fspath(path)
    found = _stat(path)
    if found is not None and not stat.S_ISREG(found.st_mode):
        if stat.S_ISDIR(found.st_mode):
            hint = (f', e.g. {osp.join(path, example)}' if example else ' in it')
            raise ValueError(f'{path} is a folder; name the file to write{hint}.')
        raise ValueError(f'{path} is {_kind(found.st_mode)}, not a regular file; '
                         'it is never written over, also with --force. Choose a '
                         'file name.')
    if found is None and path.endswith(os.sep):
        raise ValueError(f'{path} names a folder; name the file to write in it.')
    if found is not None:
        if not force:
            raise ValueError(f'{path} exists; pass --force to replace it, or choose '
                             'another name.')
        if not os.access(path, os.W_OK):
            raise ValueError(f'{path} exists and is read-only; make it writable or '
                             'choose another name.')
    _check_parent(path, make_folders)
    return path


def check_outputs_in(folder: PathLike, names: Iterable[str],
                     force: bool = False) -> List[str]:
    """:func:`check_output_file` on each of ``names`` in ``folder``, which the
    caller creates when it is missing.

    Args:
        folder (str | PathLike): The output folder, as the user gave it.
        names (Iterable[str]): The files the caller writes there.
        force (bool): Replace those that exist. Defaults to False.

    Returns:
        list[str]: The paths.

    Raises:
        ValueError: The first path that cannot take its file, as
            :func:`check_output_file` says.
    """
    return [check_output_file(osp.join(os.fspath(folder), name), force,
                              make_folders=True) for name in names]


def check_output_folder(path: PathLike) -> str:
    """Refuse ``path`` as a folder the caller is about to create or write into.

    Something at ``path`` that is not a folder (a file, a FIFO, a device, a
    broken link) is refused; an existing folder must be writable, and a
    missing one must be creatable below the nearest folder that exists. What
    the folder already holds is the caller's to check.

    Args:
        path (str | PathLike): The folder, as the user gave it.

    Returns:
        str: ``path``, as a string.

    Raises:
        ValueError: ``path`` cannot be written as a folder; the message says
            why.

    Examples:
        >>> import os.path as osp
        >>> import tempfile
        >>> from mmsoft.utils import check_output_folder
        >>> folder = osp.join(tempfile.mkdtemp(), 'data', 'digits')
        >>> check_output_folder(folder) == folder
        True
    """
    path = os.fspath(path)
    found = _stat(path)
    if found is None:
        _check_parent(path, make_folders=True)
    elif not stat.S_ISDIR(found.st_mode):
        what = 'a file' if stat.S_ISREG(found.st_mode) else _kind(found.st_mode)
        raise ValueError(f'{path} is {what}, not a folder; choose a folder.')
    elif not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f'Cannot write into {path}: the folder is not writable.')
    return path
