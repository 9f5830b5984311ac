# What every mmsoft config imports before it builds anything (mmengine's
# Config.fromfile imports `custom_imports`): `mmsoft` registers SOFT and the
# token mixers; `mmsoft.runtime` makes the process-wide changes a training or
# test process takes (weights-only checkpoint loading, atomic checkpoint
# writes, the CPU AMP and compile optimizer-wrapper names; listed in
# mmsoft/runtime.py, switched off with MMSOFT_DISABLE_RUNTIME), so the configs
# work the same with any toolbox's own tools/train.py.
custom_imports = dict(imports=['mmsoft', 'mmsoft.runtime'], allow_failed_imports=False)
