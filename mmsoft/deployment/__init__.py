"""Deployment: ONNX export of models with a SOFT backbone (needs onnx, onnxscript,
onnxruntime from requirements/deployment.txt)."""
from .onnx_export import (
    ExportModel,
    check_request,
    export_module,
    export_onnx,
    load_model,
    min_dynamic_side,
    relative_difference,
    verify_onnx,
)
from .onnx_runtime import has_newton_node, ort_session

__all__ = ['ExportModel', 'load_model', 'check_request', 'export_onnx', 'export_module',
           'min_dynamic_side', 'relative_difference', 'verify_onnx', 'ort_session',
           'has_newton_node']
