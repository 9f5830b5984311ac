"""README.md and the manual under docs/ point at what exists and show commands
our tools accept.

For every Markdown file: each relative link and image resolves to a file,
each ``configs/...`` and ``tools/...`` path it names exists, and each
``--flag`` of a command line that runs one of our tools (``tools/*.py``,
``tools/*/*.py``, ``tools/*.sh``; a launcher passes its flags on to the
``train.py`` or ``test.py`` it runs) is an option of that tool's argument
parser. The parsers are read once, in one subprocess (importing
``tools/train.py`` applies :mod:`mmsoft.runtime`, which must not reach the
other tests).
"""
import functools
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / 'README.md', *sorted((REPO / 'docs').rglob('*.md'))]
DOC_IDS = [str(p.relative_to(REPO)) for p in DOC_FILES]
README_MAX_LINES = 250

FENCE = re.compile(r'^\s*(```|~~~)')
INLINE_CODE = re.compile(r'(`+)(.+?)\1', re.S)
LINK = re.compile(r'!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
REFERENCE_LINK = re.compile(r'^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)', re.M)
HTML_SOURCE = re.compile(r'<(?:img|a)\b[^>]*?\b(?:src|href)="([^"]+)"', re.I)
REPO_PATH = re.compile(r'(?<![\w./$-])((?:configs|tools)/[\w.-]+(?:/[\w.-]+)*/?)')
TEMPLATED = tuple('{$*<[')  # configs/$name.py, tools/**/*.py: not a path
TOOL = re.compile(r'^(?:\./)?(tools/(?:[\w-]+/)?[\w-]+\.(?:py|sh))$')
FLAG = re.compile(r'^\[?(--[A-Za-z][\w-]*)')
SEPARATORS = {'&&', '||', ';', '|', '&', '(', ')', ';;'}


def _text(path: Path) -> str:
    return path.read_text(encoding='utf-8')


def _blocks(text: str) -> Tuple[List[str], List[str]]:
    """(lines inside fenced code blocks, paragraphs of the prose outside them)."""
    code, prose, paragraph, fenced = [], [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append(line)
        elif line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            prose.append('\n'.join(paragraph))
            paragraph = []
    if paragraph:
        prose.append('\n'.join(paragraph))
    return code, prose


def _command_lines(text: str) -> Iterator[str]:
    """Shell lines of the code blocks (continuations joined) and the inline
    code spans of the prose."""
    code, prose = _blocks(text)
    pending = ''
    for line in code:
        if line.rstrip().endswith('\\'):
            pending += line.rstrip()[:-1] + ' '
            continue
        yield pending + line
        pending = ''
    if pending:
        yield pending
    for paragraph in prose:  # a code span may go on over a line break
        for match in INLINE_CODE.finditer(paragraph):
            yield ' '.join(match.group(2).split())


def _tokens(line: str) -> List[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote in prose: split on spaces
        return line.split()


def tool_flags_shown(text: str) -> Iterator[Tuple[str, str]]:
    """``(tool, flag)`` for every ``--flag`` after one of our tools on a
    command line, up to the end of that command."""
    for line in _command_lines(text):
        tool = None
        for token in _tokens(line):
            if token in SEPARATORS:
                tool = None
                continue
            match = TOOL.match(token)
            if match and tool is None:
                tool = match.group(1)
                continue
            flag = FLAG.match(token)
            if tool is not None and flag:
                yield tool, flag.group(1).split('=')[0]


def relative_links(text: str) -> Iterator[str]:
    for pattern in (LINK, REFERENCE_LINK, HTML_SOURCE):
        for match in pattern.finditer(text):
            target = match.group(1)
            if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I) or target.startswith('#'):
                continue  # a URL (https:, mailto:) or an anchor on the same page
            yield target.split('#')[0].split('?')[0]


def repo_paths(text: str) -> Iterator[str]:
    for match in REPO_PATH.finditer(text):
        following = text[match.end():match.end() + 1]
        if following and following in TEMPLATED:
            continue
        yield match.group(1).rstrip('.')


# ---------------------------------------------------------------- the tools
_PARSER_DUMP = textwrap.dedent("""
    import argparse, importlib.util, json, sys
    sys.path.insert(0, sys.argv[1])

    class Captured(Exception):
        pass

    def capture(parser, *args, **kwargs):
        raise Captured(parser)

    argparse.ArgumentParser.parse_args = capture
    argparse.ArgumentParser.parse_known_args = capture
    options = {}
    for path in sys.argv[2:]:
        spec = importlib.util.spec_from_file_location('_documented_tool', path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        entry = getattr(module, 'parse_args', None) or module.main
        try:
            entry(['--help'])
        except Captured as captured:
            options[path] = sorted(captured.args[0]._option_string_actions)
        else:
            sys.exit(f'{path}: its parse_args or main never parsed arguments')
    print(json.dumps(options))
""")


def _shell_target(script: str) -> str:
    """The Python tool a launcher runs (``tools/train.py``), or ''."""
    found = re.findall(r'\$\(dirname "\$0"\)/(\w+\.py)', script)
    return f'tools/{found[0]}' if found else ''


def _shell_options(script: str) -> Set[str]:
    """The flags a shell tool itself reads: its ``case`` labels and ``[ ... =
    --flag ]`` tests."""
    options = set()
    for label in re.findall(r'(?m)^\s*((?:-{1,2}[\w-]+\|?)+)\)', script):
        options.update(label.split('|'))
    options.update(re.findall(r'=\s*(--[\w-]+)\s*\]', script))
    return options


def documented_tools() -> Set[str]:
    return {tool for path in DOC_FILES for tool, _ in tool_flags_shown(_text(path))}


@functools.lru_cache(maxsize=None)
def tool_options() -> Dict[str, Set[str]]:
    """Options each tool accepts, from its own argument parser (a launcher:
    its own flags and those of the tool it runs)."""
    python = sorted(str(p.relative_to(REPO)) for pattern in ('tools/*.py', 'tools/*/*.py')
                    for p in REPO.glob(pattern)
                    if p.name != '__init__.py' and p.parent.name != 'lib')
    shell = {str(p.relative_to(REPO)): _text(p) for p in sorted(REPO.glob('tools/*.sh'))}
    result = subprocess.run(
        [sys.executable, '-c', _PARSER_DUMP, str(REPO), *python], cwd=REPO,
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    dumped = json.loads(result.stdout.strip().splitlines()[-1])
    options = {tool: set(flags) for tool, flags in dumped.items()}
    for tool, script in shell.items():
        options[tool] = _shell_options(script) | options.get(_shell_target(script), set())
    return options


def prose_flags(text: str) -> Iterator[str]:
    """Flags quoted alone in the prose (`` `--amp` ``, `` `--resume [CKPT]` ``)."""
    _, prose = _blocks(text)
    for paragraph in prose:
        for match in INLINE_CODE.finditer(paragraph):
            flag = FLAG.match(match.group(2).strip())
            if flag:
                yield flag.group(1).split('=')[0]


# ---------------------------------------------------------------- the tests
@pytest.mark.parametrize('path', DOC_FILES, ids=DOC_IDS)
def test_relative_links_point_at_files(path):
    missing = [target for target in relative_links(_text(path))
               if not (path.parent / target).exists()]
    assert not missing, f'{path.relative_to(REPO)} links to missing files: {missing}'


@pytest.mark.parametrize('path', DOC_FILES, ids=DOC_IDS)
def test_named_config_and_tool_paths_exist(path):
    missing = sorted({p for p in repo_paths(_text(path)) if not (REPO / p).exists()})
    assert not missing, f'{path.relative_to(REPO)} names missing paths: {missing}'


@pytest.mark.parametrize('path', DOC_FILES, ids=DOC_IDS)
def test_flags_shown_are_accepted_by_their_tool(path):
    options = tool_options()
    wrong = sorted({f'{tool} {flag}' for tool, flag in tool_flags_shown(_text(path))
                    if flag not in options.get(tool, ())})
    assert not wrong, (f'{path.relative_to(REPO)} shows flags their tools do not '
                       f'accept: {wrong}')


@pytest.mark.parametrize('path', DOC_FILES, ids=DOC_IDS)
def test_flags_quoted_in_prose_belong_to_a_tool(path):
    accepted = set().union(*tool_options().values())
    wrong = sorted(set(prose_flags(_text(path))) - accepted)
    assert not wrong, (f'{path.relative_to(REPO)} quotes flags no tool accepts: '
                       f'{wrong}')


def test_every_documented_tool_exists():
    missing = sorted(t for t in documented_tools() if not (REPO / t).is_file())
    assert not missing, missing


def test_a_misspelled_flag_is_found():
    text = '```bash\npython tools/train.py configs/soft_tiny_digits.py --work-dri x\n```'
    assert list(tool_flags_shown(text)) == [('tools/train.py', '--work-dri')]
    text = ('`tools/dist_train.sh CONFIG 2 --cfg-options a=1 && '
            'tools/dist_test.sh C K 2 --allow-partial-load`')
    assert list(tool_flags_shown(text)) == [
        ('tools/dist_train.sh', '--cfg-options'),
        ('tools/dist_test.sh', '--allow-partial-load')]


def test_readme_is_a_front_door_with_the_ci_test_command():
    readme = _text(REPO / 'README.md')
    assert len(readme.splitlines()) <= README_MAX_LINES
    ci_tests = [line.strip() for line in _text(REPO / '.ci' / 'run').splitlines()
                if line.strip().startswith('python -m pytest')]
    assert ci_tests == ['python -m pytest tests']
    assert all(command in readme for command in ci_tests)
