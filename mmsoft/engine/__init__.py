"""Training components: CPU mixed precision, atomic checkpoint writes and the
checks the tools add to a run."""
from .atomic_local_backend import AtomicLocalBackend
from .checkpoint_fit_hook import CheckpointFitHook
from .collect_dir_hook import CollectInWorkDirHook
from .compilable_optim_constructor import CompilableOptimWrapperConstructor
from .cpu_amp_optim_wrapper import CPUAmpOptimWrapper
from .seg_label_check_hook import SegLabelCheckHook

__all__ = ['AtomicLocalBackend', 'CheckpointFitHook', 'CollectInWorkDirHook',
           'CPUAmpOptimWrapper', 'CompilableOptimWrapperConstructor',
           'SegLabelCheckHook']
