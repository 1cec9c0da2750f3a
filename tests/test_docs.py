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
    # one run against one is labelled as such; with seeds on both sides the verdict stands alone
    assert render.claim_verdict(c, -1) == 'confirmed (single run)' and render.claim_verdict(c, +1) == 'contradicted (single run)'
    assert render.claim_verdict(c, 0) == 'contradicted (single run)' and render.claim_verdict(c, 'any') == 'confirmed (single run)'
    seeded = render.compare(ctx, '15k', [40.0, 40.2, 40.1], [40.0 + n + 1, 40.1 + n + 1, 40.2 + n + 1])
    assert render.claim_verdict(seeded, -1) == 'confirmed' and render.claim_verdict(seeded, 'any') == 'confirmed'
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


def test_grid_studies_render_from_their_rows_and_say_when_not_run(tmp_path):
    import json
    import shutil
    empty = render.Context(results=tmp_path)
    assert render.table_step_robustness(empty).startswith('*Not run yet*')
    assert render.table_anytime_training(empty, 'bvit_tiny_cifar').startswith('*Not run yet*')
    assert render.run_comparison(empty, 'anytime_random_at_S') is None

    shutil.copy(ROOT / 'bench' / 'results' / 'head_init_accuracy.json', tmp_path)
    grids = [3, 4, 6, 24]
    sr = [{'train_steps': 6, 'seed': s, 'train_s': 180, 'test_top1': dict(zip(map(str, grids), [20., 40. + s, 50. + s, 44.]))}
          for s in range(3)]
    (tmp_path / 'step_robustness.json').write_text(json.dumps({'grids': grids, 'rows': sr}))
    at = [{'arm': arm, 'seed': s, 'train_s': 120, 'train_nfe_mean': 6.0,
           'test_top1': dict(zip(map(str, grids), [base - 10, base - 2, base + s, base - 1]))}
          for arm, base in (('fixed', 50.), ('random', 49.)) for s in range(3)]
    (tmp_path / 'anytime_training.json').write_text(json.dumps(
        {'studies': {'odevit_tiny_cifar': {'trained_depth': 6, 'grids': grids, 'rows': at}}}))
    ctx = render.Context(results=tmp_path)
    assert render.step_robust(ctx, 6) == [50., 51., 52.] and render.step_robust(ctx, 6, 24) == [44.] * 3
    table = render.table_step_robustness(ctx)
    # spread over Euler 4-24 of the means (41, 51, 44) = 10; 3 steps (20) against the best (51) = -31
    assert '| Euler 6 | 3 | 20.0 | 41.0 | 51.0 | 44.0 | 10.0 | -31.0 | 3.0 |' in table
    c = render.run_comparison(ctx, 'anytime_random_at_S')
    assert c['delta'] == pytest.approx(-1.0) and not c['finding'] and c['seeds'] == (3, 3)
    # the studies' own repeats join the budget's floor
    assert 'step_robustness trained at 6' in render.BUDGETS['3k-head'].repeats(ctx)
    assert '| random depth per update' in render.table_anytime_training(ctx, 'odevit_tiny_cifar')
