"""Stop an evaluation or a resume whose checkpoint is of another model.

mmengine loads ``load_from`` and ``--resume`` checkpoints non-strictly: weights
that do not fit are only warned about, so an evaluation scores a model left
partly at its initial weights, and a resume fails later inside the optimizer.
:class:`CheckpointFitHook` checks the weights when the checkpoint has been
read, on every rank, and stops with the keys that do not fit.
"""
import logging
from typing import List, Optional

from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapper
from mmengine.runner import find_latest_checkpoint

from mmsoft.models.utils import load_fitting_weights, strip_prefix

PURPOSES = ('test', 'resume')


def _listed(keys: List[str], limit: int = 5) -> str:
    more = f', ... ({len(keys) - limit} more)' if len(keys) > limit else ''
    return '; '.join(keys[:limit]) + more


class CheckpointFitHook(Hook):
    """Check that a loaded checkpoint's weights fit the model before they are used.

    Register it on a Runner before ``test()`` or a resuming ``train()``
    (``tools/test.py`` and ``tools/train.py --resume`` do). When the
    checkpoint has weights the model lacks, lacks weights the model has, or
    has weights of other shapes, it raises an error naming the checkpoint,
    the config's model and the keys, and saying what to do. To know what
    fits after the model's own key migrations, it loads the weights that fit
    (:func:`mmsoft.models.utils.load_fitting_weights`); mmengine's load that
    follows writes the same values again.

    Args:
        checkpoint (str, optional): The checkpoint's path, for messages; None
            for the latest one of the work dir (``--resume`` without a path).
            Defaults to None.
        purpose (str): ``'test'`` (evaluating a checkpoint) or ``'resume'``
            (continuing the run that wrote it). Defaults to ``'test'``.
        allow_partial (bool): ``'test'`` only: evaluate with the weights that
            fit, listing the others in a warning. Defaults to False.

    Examples:
        >>> from mmsoft.engine import CheckpointFitHook
        >>> hook = CheckpointFitHook('epoch_12.pth', allow_partial=True)
        >>> hook.priority
        'VERY_HIGH'
    """

    priority = 'VERY_HIGH'  # before hooks that read the weights (EMA)

    def __init__(self, checkpoint: Optional[str] = None, purpose: str = 'test',
                 allow_partial: bool = False) -> None:
        if purpose not in PURPOSES:
            raise ValueError(f'Unknown purpose {purpose!r}; use one of {PURPOSES}.')
        if allow_partial and purpose != 'test':
            raise ValueError('allow_partial serves evaluation only: a resumed run '
                             'needs every weight of the run it continues.')
        self.checkpoint = checkpoint
        self.purpose = purpose
        self.allow_partial = allow_partial

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Load the weights that fit, and stop when some do not."""
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        # The weights as Runner.load_checkpoint takes them.
        state = checkpoint.get('state_dict', checkpoint)
        filename = self.checkpoint or find_latest_checkpoint(runner.work_dir)
        weights = strip_prefix(state, 'module.', f'Checkpoint {filename}')
        metadata = getattr(state, '_metadata', None)
        if metadata is not None:
            weights._metadata = metadata
        missing, unexpected, mismatched = load_fitting_weights(model, weights)
        config = getattr(runner.cfg, 'filename', None) or 'the config'
        what = f'{type(model).__name__} of {config}'
        problems = [f'{len(keys)} {kind} ({_listed(keys)})' for kind, keys in (
            ('missing', missing), ('unexpected', unexpected),
            ('of other shapes', mismatched)) if keys]
        if self.purpose == 'resume':
            self._check_resume(runner, checkpoint, filename, what, problems)
        elif problems and self.allow_partial:
            print_log(f'--allow-partial-load: evaluating {what} with the weights of '
                      f'{filename} that fit; weights {", ".join(problems)}.',
                      logger='current', level=logging.WARNING)
        elif problems:
            raise ValueError(
                f'Checkpoint {filename} does not fit the model {what}: weights '
                f'{", ".join(problems)}. Its score would be that of a model left '
                'partly at its initial weights. Evaluate it with the config it was '
                'trained with (a released SOFT checkpoint: convert it with '
                'tools/model_converters/soft2mmsoft.py first), or pass '
                '--allow-partial-load to evaluate with the weights that fit.')

    @staticmethod
    def _check_resume(runner, checkpoint: dict, filename: str, what: str,
                      problems: List[str]) -> None:
        instead = (f'To start {what} from its weights instead, load them: '
                   f'--cfg-options load_from={filename} without --resume (the '
                   'weights that fit are loaded, the others keep their '
                   'initialisation).')
        if problems:
            raise ValueError(
                f'Cannot resume from {filename}: it is a checkpoint of another model '
                f'than {what} (weights {", ".join(problems)}). --resume continues '
                'the run that wrote a checkpoint, its optimizer and schedule '
                f'included. {instead}')
        saved = (checkpoint.get('optimizer') or {}).get('param_groups')
        wrapper = getattr(runner, 'optim_wrapper', None)
        if isinstance(wrapper, OptimWrapper) and saved is not None:
            own = len(wrapper.optimizer.param_groups)
            if len(saved) != own:
                raise ValueError(
                    f'Cannot resume from {filename}: its optimizer state has '
                    f'{len(saved)} parameter groups where the optimizer of {what} '
                    f'has {own} (the optimizer or its paramwise_cfg changed). Resume '
                    f'with the config that wrote it. {instead}')
