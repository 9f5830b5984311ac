"""The examples in mmsoft's docstrings run and print what they show."""
import doctest
import importlib
import pkgutil

import pytest

import mmsoft


def modules_with_examples():
    # mmsoft.utils.collect_env is only a `python -m` entry point; importing it
    # would make `mmsoft.utils.collect_env` name the module, not the function.
    names = [info.name for info in pkgutil.walk_packages(mmsoft.__path__, 'mmsoft.')
             if info.name != 'mmsoft.utils.collect_env']
    found = []
    for name in names:
        module = importlib.import_module(name)
        tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
        if tests:
            found.append(pytest.param(tests, id=name))
    return found


@pytest.mark.parametrize('tests', modules_with_examples())
def test_docstring_examples_run(tests):
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f'{result.failed} docstring example(s) failed'
