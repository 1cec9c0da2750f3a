"""docs/render.py: the one verdict rule, and the templates render from the committed result files."""
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('render', ROOT / 'docs' / 'render.py')
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)


@pytest.fixture(scope='module')
def ctx():
    return render.Context()


def test_reference_floor_comes_from_a_recipe_run_three_times(ctx):
    n0, recipe, budget = render.reference_floor(ctx)
    runs = render.BUDGETS[budget].repeats(ctx)[recipe]
    assert len(runs) >= 3 and n0 == pytest.approx(max(runs) - min(runs))


def test_a_budget_tested_on_fewer_images_keeps_its_range_to_itself(ctx):
    """head_init_accuracy tests on 1,000 images: its 3-seed range is its own floor, never N0 for the others."""
    small = render.BUDGETS['3k-head']
    assert not small.lends_floor and all(b.lends_floor for k, b in render.BUDGETS.items() if k != '3k-head')
    own = max(max(v) - min(v) for v in small.repeats(ctx).values() if len(v) >= 3)
    assert render.floor(ctx, '3k-head')[0] == pytest.approx(own)
    assert render.reference_floor(ctx)[2] != '3k-head'


def test_a_difference_is_a_finding_only_above_the_floor(ctx):
    n, _ = render.floor(ctx, '15k')  # no repeated run there: N0
    assert n == pytest.approx(render.reference_floor(ctx)[0])
    assert not render.compare(ctx, '15k', [40.0], [40.0 + n])['finding']  # equal to N: within noise
    c = render.compare(ctx, '15k', [40.0], [40.0 + n + 0.01])
    assert c['finding'] and c['single']
    assert render.claim_verdict(c, -1) == 'confirmed' and render.claim_verdict(c, +1) == 'contradicted'
    assert render.claim_verdict(c, 0) == 'contradicted'
    assert render.claim_verdict(render.compare(ctx, '15k', [40.0, 41.0], [40.5]), +1).startswith('inconclusive')


def test_seeds_join_their_arm():
    arms = render.by_seed([('a', {}), ('a@seed2', {}), ('b@seed1', {'seed': 1})], lambda r: 1.0)
    assert arms == {'a': {0: 1.0, 2: 1.0}, 'b': {1: 1.0}}
    assert render.fmt_arm([50.0]) == '50.00 (single run)'
    assert render.fmt_arm([50.0, 51.0]).endswith('(2 seeds)')


def test_templates_render_every_placeholder(ctx):
    for name in render.OUTPUTS:
        text = render.render((render.TEMPLATES / name).read_text(), ctx, name)
        assert '{{' not in text and '{#' not in text, name


def test_readme_is_at_most_350_lines(ctx):
    assert len(render.render((render.TEMPLATES / 'README.md.in').read_text(), ctx, 'README.md.in').splitlines()) <= 350
