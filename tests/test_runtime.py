"""``import mmsoft`` registers names only; ``import mmsoft.runtime`` makes the
listed process-wide changes, each can be switched off, and none replaces
what someone else registered."""
import json

import pytest
import torch
from helpers.process_settings import run_python
from mmengine.fileio import get_file_backend
from mmengine.fileio.backends import LocalBackend
from mmengine.fileio.backends import registry_utils as backends
from mmengine.logging import HistoryBuffer
from mmengine.registry import MODELS as ROOT_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as ROOT_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as ROOT_OPTIM_WRAPPERS
from mmengine.runner.checkpoint import CheckpointLoader

import mmsoft.runtime as runtime
from mmsoft.engine import (
    AtomicLocalBackend,
    CompilableOptimWrapperConstructor,
    CPUAmpOptimWrapper,
)
from mmsoft.models import SOFT, SOFTAttention, root_model_names
from mmsoft.registry import MODELS, register_in_root_registry
from mmsoft.utils import load_local_checkpoint


def test_importing_mmsoft_registers_names_and_changes_nothing_else():
    # The libraries mmsoft imports register their own names when imported;
    # they are imported first, so only mmsoft's own changes are compared.
    libraries = json.loads(run_python("""
        import mmsoft
        print(json.dumps(sorted(m for m in sys.modules
                                if m.split('.')[0] not in ('mmsoft', '__main__'))))
    """))
    before, after, names = json.loads(run_python(f"""
        import importlib
        for module in {libraries!r}:
            try:
                importlib.import_module(module)
            except Exception:
                pass
        before = snapshot()
        import mmsoft
        from mmsoft.models import root_model_names
        x = torch.randn(1, 3, 64, 64)
        from mmsoft.models import SOFT
        SOFT(arch='tiny', out_type='featmap', out_indices=(0, 1, 2, 3)).eval()(x)
        print(json.dumps([before, snapshot(), root_model_names()]))
    """))
    added = {name: sorted(set(after['roots'][name]) - set(keys))
             for name, keys in before['roots'].items()}
    assert added.pop('MODELS') == sorted(names)
    assert not any(added.values()), added
    assert {k: v for k, v in after.items() if k != 'roots'} == {
        k: v for k, v in before.items() if k != 'roots'}


def test_the_runtime_makes_the_listed_changes(tmp_path):
    assert runtime.runtime_status() == dict.fromkeys(runtime.CHANGES, 'applied')
    assert HistoryBuffer in torch.serialization.get_safe_globals()
    assert CheckpointLoader._schemes[''] is load_local_checkpoint
    assert isinstance(get_file_backend(str(tmp_path / 'x.pth')), AtomicLocalBackend)
    assert ROOT_OPTIM_WRAPPERS.module_dict['CPUAmpOptimWrapper'] is CPUAmpOptimWrapper
    assert ROOT_CONSTRUCTORS.module_dict[
        'CompilableOptimWrapperConstructor'] is CompilableOptimWrapperConstructor
    assert ROOT_MODELS.module_dict['SOFT'] is SOFT
    assert ROOT_MODELS.module_dict['SOFTAttention'] is SOFTAttention
    assert set(root_model_names()) >= {'SOFT', 'SOFTAttention', 'AgentAttention',
                                       'FocusedLinearAttention', 'NystromAttention'}


def test_only_token_mixers_and_the_backbone_go_into_the_root_registry():
    class InternalPart(torch.nn.Module):
        pass

    MODELS.register_module(module=InternalPart)
    try:
        assert register_in_root_registry(root_model_names()) == []
        assert 'InternalPart' not in ROOT_MODELS.module_dict
        assert MODELS.get('mmsoft.InternalPart') is InternalPart
    finally:
        MODELS.module_dict.pop('InternalPart')


def test_the_environment_variable_switches_every_change_off(tmp_path):
    assert run_python(f"""
        from mmengine.fileio import get_file_backend
        from mmengine.fileio.backends import LocalBackend
        from mmengine.logging import HistoryBuffer
        from mmengine.registry import DefaultScope, MODELS as ROOT
        from mmengine.runner.checkpoint import load_from_local
        before = snapshot()
        import mmsoft.runtime
        from mmsoft.apis.launch import prepare_config
        from mmengine.config import Config
        from mmsoft.utils import load_local_checkpoint
        assert set(mmsoft.runtime.runtime_status().values()) == {{
            'off (MMSOFT_DISABLE_RUNTIME)'}}
        assert snapshot()['loaders'] == before['loaders']
        assert type(get_file_backend({str(tmp_path / 'x.pth')!r})) is LocalBackend
        cfg = prepare_config(Config(dict(optim_wrapper=dict(), compile=True)), amp=True)
        assert cfg.optim_wrapper.type == 'mmsoft.CPUAmpOptimWrapper'
        assert cfg.optim_wrapper.constructor == 'mmsoft.CompilableOptimWrapperConstructor'
        # mmsoft itself still works: scoped names and its own safe loader.
        with DefaultScope.overwrite_default_scope('mmengine'):
            ROOT.build(dict(type='mmsoft.SOFTAttention', embed_dims=8, num_heads=1))
        path = {str(tmp_path / 'hub.pth')!r}
        buffer = HistoryBuffer()
        buffer.update(1.0)
        torch.save(dict(state_dict=dict(w=torch.ones(1)), hub=buffer), path)
        assert load_local_checkpoint(path)['hub'].mean() == 1.0
        print('ok')
    """, MMSOFT_DISABLE_RUNTIME='all') == 'ok'


def test_unknown_change_names_are_an_error(monkeypatch):
    monkeypatch.setenv('MMSOFT_DISABLE_RUNTIME', 'cpu_amp,atomic_writes')
    with pytest.raises(ValueError, match=r"unknown changes \['atomic_writes'\]; use "
                       r"any of \['torch_safe_globals'"):
        runtime.disabled_changes()


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
    saved_amp = ROOT_OPTIM_WRAPPERS.module_dict.pop('CPUAmpOptimWrapper')
    try:
        backends.register_backend('local', UserBackend, force=True, prefixes='')
        CheckpointLoader.register_scheme(prefixes='', loader=user_loader, force=True)
        ROOT_MODELS.register_module(name='SOFT', module=UserSOFT)
        ROOT_OPTIM_WRAPPERS.register_module(name='CPUAmpOptimWrapper', module=UserSOFT)
        yield UserBackend, user_loader, UserSOFT
    finally:
        backends.backends['local'], backends.prefix_to_backends[''] = saved_backends
        CheckpointLoader.register_scheme(prefixes='', loader=saved_scheme, force=True)
        ROOT_MODELS.module_dict['SOFT'] = saved_root
        ROOT_OPTIM_WRAPPERS.module_dict['CPUAmpOptimWrapper'] = saved_amp
        assert saved_scheme is not load_from_local


def test_nothing_replaces_what_someone_else_registered(taken_slots, tmp_path):
    user_backend, user_loader, user_soft = taken_slots
    assert runtime.write_local_files_atomically().startswith(
        'skipped: the local file backend is taken by')
    assert runtime.load_local_checkpoints_safely().startswith(
        'skipped: the local scheme is taken by')
    assert runtime.name_cpu_amp_in_root_registry().startswith(
        "skipped: the root registry holds another CPUAmpOptimWrapper; write "
        "'mmsoft.CPUAmpOptimWrapper'")
    assert register_in_root_registry(root_model_names()) == ['SOFT']
    assert type(get_file_backend(str(tmp_path / 'y.pth'))) is user_backend
    assert CheckpointLoader._schemes[''] is user_loader
    assert ROOT_MODELS.module_dict['SOFT'] is user_soft
    assert ROOT_MODELS.module_dict['SOFTAttention'] is SOFTAttention
