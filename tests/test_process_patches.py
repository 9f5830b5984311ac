"""The process-wide patches of ``import mmsoft``: on by default, each can be
switched off, and none replaces what someone else registered."""
import subprocess
import sys
import textwrap

import pytest
import torch
from mmengine.fileio import get_file_backend
from mmengine.fileio.backends import LocalBackend
from mmengine.fileio.backends import registry_utils as backends
from mmengine.logging import HistoryBuffer
from mmengine.registry import MODELS as ROOT_MODELS
from mmengine.registry import OPTIM_WRAPPERS as ROOT_OPTIM_WRAPPERS
from mmengine.runner.checkpoint import CheckpointLoader

import mmsoft  # noqa: F401
from mmsoft import process_patches
from mmsoft.engine import AtomicLocalBackend, CPUAmpOptimWrapper
from mmsoft.models import SOFT, SOFTAttention
from mmsoft.registry import MODELS
from mmsoft.utils import load_local_checkpoint


def test_every_patch_is_applied_by_default(tmp_path):
    assert process_patches.patch_status() == dict.fromkeys(process_patches.PATCHES,
                                                           'applied')
    assert HistoryBuffer in torch.serialization.get_safe_globals()
    assert CheckpointLoader._schemes[''] is load_local_checkpoint
    assert isinstance(get_file_backend(str(tmp_path / 'x.pth')), AtomicLocalBackend)
    assert ROOT_MODELS.module_dict['SOFT'] is SOFT
    assert ROOT_MODELS.module_dict['SOFTAttention'] is SOFTAttention
    assert ROOT_OPTIM_WRAPPERS.module_dict['CPUAmpOptimWrapper'] is CPUAmpOptimWrapper
    assert all(process_patches.ROOT_MODEL_NAMES.values())  # each says why


def test_only_the_listed_names_go_into_the_root_registry():
    class InternalPart(torch.nn.Module):
        pass

    MODELS.register_module(module=InternalPart)
    try:
        assert process_patches.register_in_root_registry() == 'applied'
        assert 'InternalPart' not in ROOT_MODELS.module_dict
        assert MODELS.get('mmsoft.InternalPart') is InternalPart
    finally:
        MODELS.module_dict.pop('InternalPart')


def test_the_environment_variable_switches_every_patch_off(tmp_path):
    code = textwrap.dedent(f"""
        import torch
        from mmengine.fileio import get_file_backend
        from mmengine.fileio.backends import LocalBackend
        from mmengine.logging import HistoryBuffer
        from mmengine.registry import MODELS as ROOT, DefaultScope
        from mmengine.runner.checkpoint import CheckpointLoader, load_from_local
        import mmsoft
        from mmsoft.apis.launch import _cpu_amp_type
        from mmsoft.process_patches import patch_status
        from mmsoft.utils import load_local_checkpoint
        assert set(patch_status().values()) == {{'off (MMSOFT_DISABLE_PATCHES)'}}
        assert HistoryBuffer not in torch.serialization.get_safe_globals()
        assert CheckpointLoader._schemes[''] is load_from_local
        assert type(get_file_backend({str(tmp_path / 'x.pth')!r})) is LocalBackend
        assert 'SOFT' not in ROOT.module_dict
        assert _cpu_amp_type() == 'mmsoft.CPUAmpOptimWrapper'
        # mmsoft itself still works: scoped names and its own safe loader.
        with DefaultScope.overwrite_default_scope('mmengine'):
            ROOT.build(dict(type='mmsoft.SOFTAttention', embed_dims=8, num_heads=1))
        path = {str(tmp_path / 'hub.pth')!r}
        buffer = HistoryBuffer()
        buffer.update(1.0)
        torch.save(dict(state_dict=dict(w=torch.ones(1)), hub=buffer), path)
        assert load_local_checkpoint(path)['hub'].mean() == 1.0
        print('ok')
    """)
    result = subprocess.run([sys.executable, '-c', code], capture_output=True,
                            text=True, timeout=300,
                            env={**__import__('os').environ,
                                 'MMSOFT_DISABLE_PATCHES': 'all'})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == 'ok'


def test_unknown_patch_names_are_an_error(monkeypatch):
    monkeypatch.setenv('MMSOFT_DISABLE_PATCHES', 'root_registry,atomic_writes')
    with pytest.raises(ValueError, match=r"unknown patches \['atomic_writes'\]; use "
                       r"any of \['torch_safe_globals'"):
        process_patches.disabled_patches()


@pytest.fixture
def taken_slots():
    """Somebody else's local backend, local loader and root names, restored after."""
    from mmengine.runner.checkpoint import load_from_local

    class UserBackend(LocalBackend):
        pass

    def user_loader(filename, map_location=None):
        return torch.load(filename, map_location=map_location, weights_only=True)

    class UserSOFT(torch.nn.Module):
        pass

    saved_backends = (backends.backends['local'], backends.prefix_to_backends[''])
    saved_scheme = CheckpointLoader._schemes['']
    saved_root = ROOT_MODELS.module_dict.pop('SOFT')
    try:
        backends.register_backend('local', UserBackend, force=True, prefixes='')
        CheckpointLoader.register_scheme(prefixes='', loader=user_loader, force=True)
        ROOT_MODELS.register_module(name='SOFT', module=UserSOFT)
        yield UserBackend, user_loader, UserSOFT
    finally:
        backends.backends['local'], backends.prefix_to_backends[''] = saved_backends
        CheckpointLoader.register_scheme(prefixes='', loader=saved_scheme, force=True)
        ROOT_MODELS.module_dict['SOFT'] = saved_root
        assert saved_scheme is not load_from_local


def test_patches_never_replace_what_someone_else_registered(taken_slots, tmp_path):
    user_backend, user_loader, user_soft = taken_slots
    assert process_patches.write_local_files_atomically().startswith(
        'skipped: the local file backend is taken by')
    assert process_patches.load_local_checkpoints_safely().startswith(
        'skipped: the local scheme is taken by')
    assert "except ['SOFT']" in process_patches.register_in_root_registry()
    assert type(get_file_backend(str(tmp_path / 'y.pth'))) is user_backend
    assert CheckpointLoader._schemes[''] is user_loader
    assert ROOT_MODELS.module_dict['SOFT'] is user_soft
    assert ROOT_MODELS.module_dict['SOFTAttention'] is SOFTAttention
