"""mmsoft.utils.output_paths: what a tool may write, decided before the work.

Nothing here writes to a device or opens a FIFO: the checks only look
(``stat``, ``access``), so a FIFO that was opened would hang the test.
"""
import os
import re
import sys

import pytest

from mmsoft.utils import check_output_file, check_output_folder, check_outputs_in

LINUX = sys.platform.startswith('linux')


def E(path) -> str:
    """``path`` as a regular expression that matches it literally."""
    return re.escape(str(path))


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / 'model.onnx'
    os.mkfifo(path)
    return path


@pytest.mark.parametrize('force', [False, True])
def test_a_fifo_is_refused_even_with_force(fifo, force):
    with pytest.raises(ValueError, match=rf'^{E(fifo)} is a FIFO \(named pipe\), not a '
                       'regular file; it is never written over, also with --force'):
        check_output_file(fifo, force)


@pytest.mark.parametrize('path', ['/dev/null', 'link'])
def test_a_device_and_a_link_to_it_are_refused_even_with_force(tmp_path, path):
    if path == 'link':  # a stand-in for a copy of the device node
        path = tmp_path / 'epoch_12.pth'
        path.symlink_to('/dev/null')
    with pytest.raises(ValueError, match=rf'^{E(path)} is a character device, not a '
                       'regular file'):
        check_output_file(path, force=True)


def test_a_folder_is_refused_with_a_file_name_to_use(tmp_path):
    with pytest.raises(ValueError, match=rf'^{E(tmp_path)} is a folder; name the file '
                       rf'to write, e.g. {E(tmp_path / "model.onnx")}\.$'):
        check_output_file(tmp_path, force=True, example='model.onnx')
    with pytest.raises(ValueError, match='names a folder; name the file to write'):
        check_output_file(f'{tmp_path}/new/')


def test_an_existing_file_is_replaced_only_with_force(tmp_path):
    path = tmp_path / 'epoch_12.pth'
    path.write_bytes(b'weights')
    with pytest.raises(ValueError, match=rf'^{E(path)} exists; pass --force to replace '
                       'it, or choose another name'):
        check_output_file(path)
    assert check_output_file(path, force=True) == str(path)
    path.chmod(0o444)
    if os.access(path, os.W_OK):  # root writes read-only files
        assert check_output_file(path, force=True) == str(path)
    else:
        with pytest.raises(ValueError, match='exists and is read-only'):
            check_output_file(path, force=True)
    assert path.read_bytes() == b'weights'


def test_a_broken_link_is_refused(tmp_path):
    path = tmp_path / 'out.png'
    path.symlink_to(tmp_path / 'gone' / 'out.png')
    with pytest.raises(ValueError, match=rf'^{E(path)} is a link to .*gone/out.png, which '
                       'does not exist'):
        check_output_file(path, force=True)


def test_the_folder_must_exist_be_a_folder_and_be_writable(tmp_path):
    with pytest.raises(ValueError, match=rf'^Cannot write {E(tmp_path)}/a/b.pth: the '
                       rf'folder {E(tmp_path)}/a does not exist; create it first'):
        check_output_file(tmp_path / 'a' / 'b.pth')
    nested = tmp_path / 'a' / 'b' / 'c.png'
    assert check_output_file(nested, make_folders=True) == str(nested)
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match=rf'^Cannot write {E(tmp_path)}/file/a/c.png: '
                       rf'{E(tmp_path)}/file is not a folder'):
        check_output_file(tmp_path / 'file' / 'a' / 'c.png', make_folders=True)
    assert list(tmp_path.iterdir()) == [tmp_path / 'file']  # nothing made


@pytest.mark.skipif(not LINUX, reason='/proc/self: a folder nobody can write')
def test_an_unwritable_folder_is_refused_before_the_work():
    with pytest.raises(ValueError, match='^Cannot write /proc/self/x.onnx: the folder '
                       '/proc/self is not writable'):
        check_output_file('/proc/self/x.onnx', force=True)
    with pytest.raises(ValueError, match='^Cannot write into /proc/self: the folder '
                       'is not writable'):
        check_output_folder('/proc/self')


def test_an_output_folder_is_a_folder_or_can_be_made(tmp_path, fifo):
    assert check_output_folder(tmp_path) == str(tmp_path)
    assert check_output_folder(tmp_path / 'data' / 'digits')
    with pytest.raises(ValueError, match=rf'^{E(fifo)} is a FIFO \(named pipe\), not a '
                       'folder'):
        check_output_folder(fifo)
    (tmp_path / 'data.txt').write_text('')
    with pytest.raises(ValueError, match='data.txt is a file, not a folder'):
        check_output_folder(tmp_path / 'data.txt')


def test_outputs_in_a_folder_are_each_checked(tmp_path):
    out = tmp_path / 'bench'
    assert check_outputs_in(out, ['a.csv', 'a.png']) == [str(out / 'a.csv'),
                                                         str(out / 'a.png')]
    out.mkdir()
    (out / 'a.png').write_bytes(b'')
    with pytest.raises(ValueError, match=r'a.png exists; pass --force'):
        check_outputs_in(out, ['a.csv', 'a.png'])
    assert check_outputs_in(out, ['a.csv', 'a.png'], force=True)
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match=r'file is not a folder'):
        check_outputs_in(tmp_path / 'file', ['a.csv'])
