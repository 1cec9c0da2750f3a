"""The size and shape of the installed package's code, as issue 61 measures it (release tooling, not installed).

    python -m tools.code_size [--root timm_odevit] [--json]

Read with Python's ``tokenize`` and ``ast``, docstrings (the first string of a module, class or function), comments
and blank lines left out:

- ``tokens``: tokens of the code (no comments, newlines, indents, dedents or docstrings);
- ``statements``: logical lines (``tokenize``'s NEWLINE), docstrings left out;
- ``code_lines``: physical lines that hold a counted token; ``long_line_share``: the share of them over 100 characters;
- ``tuple_packing``: assignments with a tuple on both sides (``a, b = x, y``);
- ``dict_writes``: writes through ``__dict__`` (``x.__dict__[k] = v``, ``vars(x)[k] = v``, ``x.__dict__.update(...)``);
- ``semicolons``: ``;`` between statements;
- ``long_modules``: modules over 300 physical lines;
- ``private_names``: uses of private names (one leading underscore) of torch, timm, torchdiffeq or argparse outside
  ``_compat.py``: imports from their private modules or of their private names, attribute reads and writes and
  ``getattr``-style strings of names their sources hold and this package does not define, and methods overriding a
  private method of one of their classes;
- ``import_cycles``: cycles (strongly connected groups) in the graph of the package's imports of its own modules,
  ``module_level`` with the imports a module runs when it is imported, ``all`` with those inside functions too.
"""
import argparse
import ast
import importlib
import importlib.util
import io
import json
import pathlib
import re
import sys
import tokenize
from typing import Dict, Iterator, List, Optional, Set, Tuple

UPSTREAM = ('torch', 'timm', 'torchdiffeq', 'argparse')
COMPAT_MODULE = '_compat.py'
LONG_LINE = 100
LONG_MODULE = 300
SKIPPED_TOKENS = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}
NAMEDTUPLE_API = {'_replace', '_asdict', '_fields', '_make', '_field_defaults'}  # public despite the underscore
TIMM_SCRIPT_NAMES = {'_parse_args'}  # private names of timm's train.py, which the installed timm package lacks
ATTRIBUTE_FUNCTIONS = {'getattr', 'setattr', 'hasattr', 'delattr'}
DEFAULT_ROOT = pathlib.Path(__file__).resolve().parents[1] / 'timm_odevit'


def is_private(name: str) -> bool:
    """One leading underscore, not a dunder name."""
    return name.startswith('_') and not name.startswith('__') and len(name) > 1


def docstring_nodes(tree: ast.Module) -> Set[int]:
    """ids of the ``Expr`` statements that are docstrings of the module, a class or a function."""
    definitions = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    owners = [tree] + [n for n in ast.walk(tree) if isinstance(n, definitions)]
    found = set()
    for owner in owners:
        first = owner.body[0] if owner.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            found.add(id(first))
    return found


def code_tokens(source: str, docstring_starts: Set[Tuple[int, int]]) -> Iterator[tokenize.TokenInfo]:
    """The tokens of ``source`` that are code (no comments, layout tokens or docstrings), each logical line ended
    by its NEWLINE token."""
    line_has_code = False
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NEWLINE and line_has_code:
            line_has_code = False
            yield token
        if token.type in SKIPPED_TOKENS:
            continue
        if token.type == tokenize.STRING and token.start in docstring_starts:
            continue
        line_has_code = True
        yield token


def is_tuple_packing(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Tuple)
        and any(isinstance(target, ast.Tuple) for target in node.targets)
    )


def is_dict_access(node: ast.AST) -> bool:
    """``x.__dict__`` or ``vars(x)``."""
    if isinstance(node, ast.Attribute):
        return node.attr == '__dict__'
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == 'vars'


def is_dict_write(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return is_dict_access(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        mutators = ('update', 'setdefault', 'pop', 'popitem', 'clear', '__setitem__', '__delitem__')
        return node.func.attr in mutators and is_dict_access(node.func.value)
    return False


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def imported_modules(node: ast.AST, module: str, is_package: bool, known: Set[str]) -> List[str]:
    """The package's own modules an import statement names (a name that is a submodule counts as that module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.level:
        package = module if is_package else module.rpartition('.')[0]
        for _ in range(node.level - 1):
            package = package.rpartition('.')[0]
        base = f'{package}.{node.module}' if node.module else package
    else:
        base = node.module or ''
    targets = []
    for alias in node.names:
        submodule = f'{base}.{alias.name}'
        if submodule in known:
            targets.append(submodule)
        elif base in known:
            targets.append(base)
    return sorted(set(targets))


def function_level_imports(tree: ast.Module) -> Set[int]:
    """ids of the import statements inside a function."""
    inner = set()
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    inner.add(id(node))
    return inner


def strongly_connected(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Tarjan's strongly connected components with more than one module (or a module importing itself)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    groups: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def upstream_identifiers(names: Set[str]) -> Set[str]:
    """Those of ``names`` that the source of torch, timm, torchdiffeq or argparse holds as a whole word."""
    if not names:
        return set()
    pattern = re.compile(r'\b(' + '|'.join(sorted(map(re.escape, names))) + r')\b')
    found = set()
    for package in UPSTREAM:
        spec = importlib.util.find_spec(package)
        if spec is None:
            continue
        locations = list(spec.submodule_search_locations or [])
        files = [p for folder in locations for p in pathlib.Path(folder).rglob('*.py')]
        files += [pathlib.Path(spec.origin)] if not locations and spec.origin else []
        for path in files:
            found.update(pattern.findall(path.read_text(encoding='utf-8', errors='replace')))
            if found == names:
                return found
    return found


def upstream_alias_roots(tree: ast.Module) -> Dict[str, str]:
    """Local names bound to upstream modules or objects by imports: name -> dotted upstream path."""
    roots = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                package = alias.name.split('.')[0]
                if package in UPSTREAM:
                    roots[alias.asname or package] = alias.name if alias.asname else package
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or '').split('.')[0] in UPSTREAM:
            for alias in node.names:
                roots[alias.asname or alias.name] = f'{node.module}.{alias.name}'
    return roots


def resolve_upstream(path: str) -> Optional[object]:
    """The upstream object at a dotted path (a module, then attributes), or None."""
    parts = path.split('.')
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:split]))
        except Exception:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
        return obj
    return None


class PackageScan:
    """One pass over the package's modules: the numbers of the module docstring."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.files = sorted(p for p in root.rglob('*.py') if '__pycache__' not in p.parts)
        self.sources = {p: p.read_text(encoding='utf-8') for p in self.files}
        self.trees = {p: ast.parse(source, str(p)) for p, source in self.sources.items()}

    def measure(self) -> Dict[str, object]:
        tokens = 0
        statements = 0
        code_lines = 0
        long_lines = 0
        tuple_packing = []
        dict_writes = []
        semicolons = []
        long_modules = {}
        for path in self.files:
            source, tree = self.sources[path], self.trees[path]
            where = str(path.relative_to(self.root.parent))
            docstrings = docstring_nodes(tree)
            starts = {(n.lineno, n.col_offset) for n in ast.walk(tree) if id(n) in docstrings}
            lines: Set[int] = set()
            for token in code_tokens(source, starts):
                if token.type == tokenize.NEWLINE:
                    statements += 1
                    continue
                tokens += 1
                lines.update(range(token.start[0], token.end[0] + 1))
                if token.type == tokenize.OP and token.string == ';':
                    semicolons.append(f'{where}:{token.start[0]}')
            physical = source.splitlines()
            code_lines += len(lines)
            long_lines += sum(len(physical[i - 1]) > LONG_LINE for i in lines)
            for node in ast.walk(tree):
                if is_tuple_packing(node):
                    tuple_packing.append(f'{where}:{node.lineno}')
                if is_dict_write(node):
                    dict_writes.append(f'{where}:{node.lineno}')
            if len(physical) > LONG_MODULE:
                long_modules[where] = len(physical)
        return {
            'modules': len(self.files),
            'tokens': tokens,
            'statements': statements,
            'code_lines': code_lines,
            'long_line_share': round(long_lines / max(code_lines, 1), 4),
            'tuple_packing': len(tuple_packing),
            'dict_writes': len(dict_writes),
            'semicolons': len(semicolons),
            'long_modules': long_modules,
            'private_names': self.private_names(),
            'import_cycles': self.import_cycles(),
            'where': {
                'tuple_packing': tuple_packing,
                'dict_writes': dict_writes,
                'semicolons': semicolons,
            },
        }

    # ---- private names of torch / timm / torchdiffeq / argparse ---------------------------------------------
    def own_definitions(self) -> Set[str]:
        """Names this package defines outside ``_compat.py``: functions, classes, module and class attributes,
        ``self.<name>`` assignments."""
        names = set()
        for path, tree in self.trees.items():
            if path.name == COMPAT_MODULE:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    if isinstance(node.value, ast.Name) and node.value.id == 'self':
                        names.add(node.attr)
                elif is_dict_write(node):  # x.__dict__['name'] = v, x.__dict__.update(name=v)
                    key = node.slice if isinstance(node, ast.Subscript) else None
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        names.add(key.value)
                    names.update(k.arg for k in getattr(node, 'keywords', ()) if k.arg)
        return names

    def upstream_bases(self) -> Dict[str, List[object]]:
        """Class name -> the upstream classes it derives from (through the package's own classes too)."""
        direct: Dict[str, List[str]] = {}
        bases: Dict[str, List[object]] = {}
        for tree in self.trees.values():
            roots = upstream_alias_roots(tree)
            for node in ast.walk(tree):
                if not isinstance(node, ast.ClassDef):
                    continue
                direct[node.name] = []
                for base in node.bases:
                    dotted = ast.unparse(base)
                    head, _, rest = dotted.partition('.')
                    if head in roots:
                        resolved = resolve_upstream(roots[head] + ('.' + rest if rest else ''))
                        if isinstance(resolved, type):
                            bases.setdefault(node.name, []).append(resolved)
                    else:
                        direct[node.name].append(dotted.split('.')[-1])
        for _ in range(len(direct)):  # through the package's own classes
            for name, parents in direct.items():
                for parent in parents:
                    for base in bases.get(parent, []):
                        if base not in bases.setdefault(name, []):
                            bases[name].append(base)
        return bases

    def private_names(self) -> Dict[str, object]:
        own = self.own_definitions()
        bases = self.upstream_bases()
        uses: List[Tuple[str, int, str]] = []
        candidates: List[Tuple[str, int, str]] = []
        overrides = set()
        for path, tree in self.trees.items():
            if path.name == COMPAT_MODULE:
                continue
            where = str(path.relative_to(self.root.parent))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and not node.level:
                    package = (node.module or '').split('.')
                    if package[0] in UPSTREAM:
                        private = [p for p in package if is_private(p)]
                        private += [a.name for a in node.names if is_private(a.name)]
                        uses.extend((where, node.lineno, name) for name in private)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        parts = alias.name.split('.')
                        if parts[0] in UPSTREAM:
                            uses.extend((where, node.lineno, p) for p in parts if is_private(p))
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_private(item.name):
                            if any(hasattr(base, item.name) for base in bases.get(node.name, [])):
                                uses.append((where, item.lineno, item.name))
                                overrides.add(item.name)
                elif isinstance(node, ast.Attribute) and is_private(node.attr):
                    candidates.append((where, node.lineno, node.attr))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    if node.func.id in ATTRIBUTE_FUNCTIONS and len(node.args) > 1:
                        name = node.args[1]
                        if isinstance(name, ast.Constant) and isinstance(name.value, str) and is_private(name.value):
                            candidates.append((where, node.lineno, name.value))
        foreign = {name for _, _, name in candidates if name not in own - overrides and name not in NAMEDTUPLE_API}
        upstream = upstream_identifiers(foreign - TIMM_SCRIPT_NAMES) | (foreign & TIMM_SCRIPT_NAMES)
        uses.extend(use for use in candidates if use[2] in upstream)
        uses = sorted(set(uses))
        return {
            'count': len(uses),
            'names': sorted({name for _, _, name in uses}),
            'where': [f'{where}:{line} {name}' for where, line, name in uses],
        }

    # ---- imports of the package's own modules ---------------------------------------------------------------
    def import_graphs(self) -> Dict[str, Dict[str, Set[str]]]:
        modules = {module_name(p, self.root): p for p in self.files}
        known = set(modules)
        graphs: Dict[str, Dict[str, Set[str]]] = {'module_level': {}, 'all': {}}
        for module, path in modules.items():
            tree = self.trees[path]
            inner = function_level_imports(tree)
            for graph in graphs.values():
                graph.setdefault(module, set())
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                targets = set(imported_modules(node, module, path.name == '__init__.py', known)) - {module}
                graphs['all'][module].update(targets)
                if id(node) not in inner:
                    graphs['module_level'][module].update(targets)
        return graphs

    def import_cycles(self) -> Dict[str, List[List[str]]]:
        return {kind: strongly_connected(graph) for kind, graph in self.import_graphs().items()}


def measure(root: pathlib.Path = DEFAULT_ROOT) -> Dict[str, object]:
    """The numbers of the module docstring for the package at ``root``."""
    return PackageScan(pathlib.Path(root)).measure()


def report(numbers: Dict[str, object]) -> str:
    """The numbers as text, one per line."""
    private = numbers['private_names']
    cycles = numbers['import_cycles']
    lines = [
        f"modules                           {numbers['modules']}",
        f"tokens                            {numbers['tokens']}",
        f"statements                        {numbers['statements']}",
        f"code lines                        {numbers['code_lines']}",
        f"code lines over {LONG_LINE} characters     {100 * numbers['long_line_share']:.1f} %",
        f"tuple-packing assignments         {numbers['tuple_packing']}",
        f"writes through __dict__           {numbers['dict_writes']}",
        f"semicolons                        {numbers['semicolons']}",
        f"modules over {LONG_MODULE} lines             {len(numbers['long_modules'])}",
        f"private upstream names (uses)     {private['count']}",
        f"import cycles (module level)      {len(cycles['module_level'])}",
        f"import cycles (with functions')   {len(cycles['all'])}",
    ]
    lines += [f'  long module: {where} ({n} lines)' for where, n in numbers['long_modules'].items()]
    lines += [f'  private: {where}' for where in private['where']]
    lines += [f"  cycle ({kind}): {' <-> '.join(group)}" for kind, groups in cycles.items() for group in groups]
    return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--root', default=str(DEFAULT_ROOT), help='the package folder to measure')
    parser.add_argument('--json', action='store_true', help='print the numbers as JSON')
    args = parser.parse_args(argv)
    numbers = measure(pathlib.Path(args.root))
    print(json.dumps(numbers, indent=1) if args.json else report(numbers))


if __name__ == '__main__':
    sys.exit(main())
