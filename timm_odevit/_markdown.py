"""User text (file names, dataset names, a training command, a run's arguments) in a model card's markdown: escaped
or fenced, so that it cannot change the card's structure."""
import re


def md_text(text) -> str:
    """User text for a card's markdown line or table cell: one line, the characters that would change the card's
    structure backslash-escaped (a ``|`` splits no table row, ``<b>`` is text, not HTML, a backtick opens no code)."""
    return re.sub(r'([\\`|<>&])', r'\\\1', ' '.join(str(text).split()))


def md_code(text) -> str:
    """User text as an inline code span that stays in its table cell: one line, ``|`` escaped (tables split their
    cells before code spans), fenced by more backticks than it holds."""
    text = ' '.join(str(text).split()).replace('|', '\\|')
    fence = '`' * (max(map(len, re.findall('`+', text)), default=0) + 1)
    pad = ' ' if text.startswith('`') or text.endswith('`') else ''
    return f'{fence}{pad}{text}{pad}{fence}'


def md_block(text, language: str = '') -> str:
    """User text of any lines (a training command) as a fenced code block, which shows every line as written: no
    line becomes a heading, a table or HTML."""
    text = str(text).strip('\n')
    fence = '`' * max(3, max(map(len, re.findall('`+', text)), default=0) + 1)
    return f'{fence}{language}\n{text}\n{fence}'
