"""Version of mmsoft."""
import re

__version__ = '0.1.0'


def parse_version_info(version_str: str) -> tuple:
    """Split a version string into numbers and a pre-release tag.

    Args:
        version_str (str): A version such as ``'0.1.0'`` or ``'0.1.0rc1'``.

    Returns:
        tuple: For example ``(0, 1, 0)`` or ``(0, 1, 0, 'rc1')``.
    """
    match = re.fullmatch(r'(\d+(?:\.\d+)*)(.*)', version_str)
    if match is None:
        raise ValueError(f'Unparsable version {version_str!r}.')
    numbers = tuple(int(n) for n in match.group(1).split('.'))
    return numbers + ((match.group(2),) if match.group(2) else ())


version_info = parse_version_info(__version__)
