"""Parameters that a train-mode BatchNorm makes irrelevant."""
import torch


def bias_before_batchnorm(model: torch.nn.Module) -> set:
    """Names of convolution biases followed by a BatchNorm in a Sequential."""
    names = set()
    for prefix, seq in model.named_modules():
        if isinstance(seq, torch.nn.Sequential):
            for i, (conv, bn) in enumerate(zip(seq, seq[1:])):
                if (isinstance(conv, torch.nn.Conv2d) and conv.bias is not None
                        and isinstance(bn, torch.nn.BatchNorm2d)):
                    names.add(f'{prefix}.{i}.bias')
    return names
