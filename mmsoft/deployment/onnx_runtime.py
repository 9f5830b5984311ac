"""ONNX Runtime sessions for exported SOFT models, with mmsoft's Newton node.

A graph exported with ``newton_node=True`` (:func:`.export_module`,
``tools/deployment/pytorch2onnx.py --newton-node``) holds each Newton inverse
as one node ``ai.onnx.contrib::SOFTNewtonApply``. ONNX has no operator that
decomposes a matrix, so the standard graph evaluates the 20 Newton steps as
40 products of ``m x m`` matrices per head (about 93 GFLOP per head at
800 x 1344); the node instead runs :func:`mmsoft.ops.newton_apply` (one
spectral decomposition per head, split over the CPU threads), registered
with ONNX Runtime through onnxruntime-extensions' Python operators. Such a
graph needs this module (or a native implementation of the node) to run;
the standard graph runs in any ONNX runtime.
"""
from typing import Optional

import numpy as np
import torch

from mmsoft.ops.dispatch import NEWTON_NODE, newton_apply

_REGISTERED = False


def _register_newton_node() -> None:
    """Register the Python implementation of :data:`NEWTON_NODE` (once)."""
    global _REGISTERED
    if _REGISTERED:
        return
    # The deployment packages are optional: imported where they are used.
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    @onnx_op(op_type=NEWTON_NODE.split('::')[1],
             inputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float],
             attrs={'num_iters': PyCustomOpDef.dt_int64,
                    'reg': PyCustomOpDef.dt_float,
                    'backoff': PyCustomOpDef.dt_int64,
                    'group': PyCustomOpDef.dt_int64})
    def soft_newton_apply(a: np.ndarray, rhs: np.ndarray, **attrs) -> np.ndarray:
        with torch.no_grad():
            out = newton_apply(torch.from_numpy(np.ascontiguousarray(a)),
                               torch.from_numpy(np.ascontiguousarray(rhs)),
                               num_iters=int(attrs['num_iters']),
                               reg=float(attrs['reg']),
                               backoff=bool(attrs['backoff']),
                               group=int(attrs['group']))
        return out.numpy()

    _REGISTERED = True


def has_newton_node(path: str) -> bool:
    """Whether the ONNX file at ``path`` holds :data:`NEWTON_NODE`."""
    import onnx  # optional (requirements/deployment.txt)
    domain, name = NEWTON_NODE.split('::')
    graph = onnx.load(path, load_external_data=False).graph
    return any(n.domain == domain and n.op_type == name for n in graph.node)


def ort_session(path: str, threads: Optional[int] = None):
    """An ONNX Runtime CPU session for an exported SOFT model.

    A graph with :data:`NEWTON_NODE` gets the node's implementation
    (onnxruntime-extensions must be installed) and runs it on torch's
    threads; ONNX Runtime's own threads then sleep instead of spinning
    while the node runs.

    Args:
        path (str): The ONNX file.
        threads (int, optional): Intra-op threads of ONNX Runtime. Defaults
            to None (torch's thread count).

    Returns:
        onnxruntime.InferenceSession: The session.
    """
    import onnxruntime  # optional (requirements/deployment.txt)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    if has_newton_node(path):
        try:
            from onnxruntime_extensions import get_library_path  # optional
        except ImportError as err:
            raise ImportError(
                f'{path} holds {NEWTON_NODE} nodes, which need onnxruntime-extensions '
                "(pip install -r requirements/deployment.txt); or export without "
                '--newton-node for a graph of standard operators.') from err
        _register_newton_node()
        options.register_custom_ops_library(get_library_path())
        options.add_session_config_entry('session.intra_op.allow_spinning', '0')
    return onnxruntime.InferenceSession(path, options,
                                        providers=['CPUExecutionProvider'])
