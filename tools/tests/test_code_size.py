"""tools.code_size: each number counts what it says on a small package, docstrings and comments left out."""
import textwrap

from tools import code_size


def _package(root, modules):
    package = root / 'pkg'
    package.mkdir()
    for name, source in modules.items():
        (package / name).write_text(textwrap.dedent(source))
    return package


def test_the_numbers_of_a_small_package(tmp_path):
    package = _package(tmp_path, {
        '__init__.py': '"""The package."""\nfrom .a import f\n',
        'a.py': '''\
            """Module a: its docstring and comments are not code."""
            import torch
            from torch.nn.modules import module as torch_module


            def f(m):
                """f's docstring."""
                a, b = 1, 2  # packed
                m.__dict__['x'] = a; m.__dict__.update(y=b)
                from .b import g
                return m._modules, torch_module._global_forward_hooks, g, ''' + "'" + 'x' * 80 + "'" + '''
            ''',
        'b.py': 'from .a import f\n\n\ndef g():\n    return f\n',
        '_compat.py': 'import torch\n\nHOOKS = torch.nn.modules.module._global_forward_hooks\n',
    })
    numbers = code_size.measure(package)
    assert numbers['modules'] == 4
    assert numbers['statements'] == 13  # logical lines (the semicolon's two statements are one): 1 + 7 + 3 + 2
    assert numbers['code_lines'] == 13
    assert numbers['long_line_share'] == round(1 / 13, 4)
    assert numbers['tuple_packing'] == 1
    assert numbers['dict_writes'] == 2
    assert numbers['semicolons'] == 1
    assert numbers['long_modules'] == {}
    assert numbers['private_names']['names'] == ['_global_forward_hooks', '_modules']  # not _compat.py's
    assert numbers['import_cycles'] == {'module_level': [], 'all': [['pkg.a', 'pkg.b']]}  # a imports b in f


def test_the_tokens_leave_docstrings_and_comments_out():
    source = '"""doc"""\nx = 1  # one\n\n\ndef f():\n    """doc"""\n    return x\n'
    tree = code_size.ast.parse(source)
    starts = {(n.lineno, n.col_offset) for n in code_size.ast.walk(tree) if id(n) in code_size.docstring_nodes(tree)}
    tokens = [t.string for t in code_size.code_tokens(source, starts) if t.type != code_size.tokenize.NEWLINE]
    assert tokens == ['x', '=', '1', 'def', 'f', '(', ')', ':', 'return', 'x']


def test_a_function_level_import_is_a_cycle_of_all_imports_only(tmp_path):
    package = _package(tmp_path, {
        '__init__.py': '',
        'a.py': 'from . import b\n',
        'b.py': 'def g():\n    from .a import b\n    return b\n',
        'c.py': 'from .a import b\n',
    })
    cycles = code_size.PackageScan(package).import_cycles()
    assert cycles == {'module_level': [], 'all': [['pkg.a', 'pkg.b']]}


def test_an_override_of_a_private_upstream_method_is_a_private_use(tmp_path):
    package = _package(tmp_path, {
        'm.py': '''\
            from timm.models.vision_transformer import VisionTransformer


            class Mine(VisionTransformer):
                def _pos_embed(self, x):
                    return x

                def _own(self):
                    return self._own
            ''',
    })
    assert code_size.PackageScan(package).private_names()['where'] == ['pkg/m.py:5 _pos_embed']
