"""Training components: CPU mixed precision and atomic checkpoint writes."""
from .atomic_local_backend import AtomicLocalBackend
from .compilable_optim_constructor import CompilableOptimWrapperConstructor
from .cpu_amp_optim_wrapper import CPUAmpOptimWrapper

__all__ = ['AtomicLocalBackend', 'CPUAmpOptimWrapper',
           'CompilableOptimWrapperConstructor']
