"""docs/render.py: the one verdict rule, and the templates render from the committed result files."""
import importlib.util
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('render', ROOT / 'docs' / 'render.py')
render = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)


@pytest.fixture(scope='module')
def ctx():
    return render.Context()


class _Crafted:
    """A Context stand-in: BUDGETS['15k'] reads odevit_ablation's rows, here made up."""

    def __init__(self, rows):
        self.rows = rows

    def json(self, name):
        assert name == 'odevit_ablation'
        return {'rows': self.rows, 'budget': '15000 CIFAR-10 train images; test on 2000 test images (first per class)'}

    lookup = render.Context.lookup


def _rows(**arms):
    return [{'variant': k, 'test_top1': v, 'seed': i} for k, vs in arms.items() for i, v in enumerate(vs)]


def test_a_comparisons_floor_is_the_larger_of_its_arms_ranges_and_sampling_of_its_budgets_images():
    ctx = _Crafted([])
    n = render.BUDGETS['15k'].images(ctx)  # read from the result file's budget string
    assert n == 2000
    sampling = 200 * (2 * 0.5 * 0.5 / n) ** 0.5  # 2·√(2p(1−p)/n) at p = 50 %, in points
    assert render.binomial_floor(50., n) == pytest.approx(sampling)
    narrow = [50.0, 50.2, 49.8]  # range 0.4 < sampling (~3.16): sampling decides
    assert render.floor(ctx, '15k', narrow, narrow) == (pytest.approx(sampling), 'sampling 2,000 images at 50.0 %')
    wide = [45.0, 50.0, 55.0]  # range 10 > sampling
    assert render.floor(ctx, '15k', narrow, wide) == (pytest.approx(10.0), 'range of B')
    assert render.floor(ctx, '15k', wide, narrow) == (pytest.approx(10.0), 'range of A')
    assert render.floor(ctx, '15k', [40.0, 60.0], narrow)[0] == pytest.approx(sampling)  # a 2-run range is no floor
    # p is the two arms' mean top-1; n the budget's own images
    assert render.floor(ctx, '15k', [90.0] * 3, [90.0] * 3)[0] == pytest.approx(render.binomial_floor(90., 2000))


def test_an_unrelated_noisy_arm_at_the_budget_leaves_a_comparisons_floor_alone(monkeypatch):
    """Issue 62: the floor was the largest range of any arm at the budget, so a noisy arm elsewhere (plain bViT at 48
    iterations, far off its trained point) erased findings at the whole budget; each comparison now has its own."""
    noisy = [40.0, 50.0, 46.0]
    budget = render.Budget('crafted', 'x', 2000, lambda c: {'noisy recipe': noisy, 'x': [50.0, 50.2, 50.1]})
    monkeypatch.setitem(render.BUDGETS, 'crafted', budget)
    monkeypatch.setattr(render, 'COMPARISONS', [('c', 'noisy vs x', 'crafted', lambda c: noisy, lambda c: [50.0] * 3,
                                                 'cmd')])
    c = render.compare(None, 'crafted', [54.0, 54.2, 54.1], [50.0, 50.2, 50.1])
    assert c['floor'] == pytest.approx(render.binomial_floor(52.1, 2000)) and c['finding']  # not 10, the noisy range
    assert c['floor_from'] == 'sampling 2,000 images at 52.1 %'
    assert render.compare(None, 'crafted', noisy, [50.0] * 3)['floor'] == pytest.approx(10.0)  # its own arm's range
    noise = render.budget_noise(None, 'crafted')  # shown per budget, read by no verdict
    assert noise['range'] == pytest.approx(10.0) and noise['recipe'] == 'noisy recipe'


def test_a_comparison_shows_its_margin_and_welch_t():
    import statistics
    ctx = _Crafted([])
    a = [56.0, 56.5, 56.2]
    b = [50.0, 50.1, 50.2]
    c = render.compare(ctx, '15k', a, b)
    delta = statistics.fmean(a) - statistics.fmean(b)
    t = delta / (statistics.variance(a) / 3 + statistics.variance(b) / 3) ** 0.5
    assert c['margin'] == pytest.approx(abs(delta) - c['floor']) and c['margin'] > 0 and c['finding']
    assert c['t'] == pytest.approx(t) and render.fmt_t(c['t']) == f'+{t:.1f}'
    assert render.fmt_noise(c) == f'N {c["floor"]:.2f}, margin +{abs(delta) - c["floor"]:.2f}, t +{t:.1f}'
    assert render.welch_t([50.0], b) is None and render.fmt_t(None) == '–'  # a single run has no spread
    assert render.welch_t([51.0] * 3, [50.0] * 3) == float('inf') and render.fmt_t(-float('inf')) == '-∞'
    close = render.compare(ctx, '15k', [50.0, 50.5, 51.0], b)
    assert close['margin'] < 0 and not close['finding']


def test_verdicts_only_from_three_seeds_per_arm():
    ctx = _Crafted(_rows(x=[50.0, 50.2, 50.1]))
    n = render.binomial_floor(50., 2000)
    single = render.compare(ctx, '15k', [50.0 + n + 1], [50.0])
    assert single['finding'] and single['preliminary']
    assert render.claim_verdict(single, +1) == render.verdict_text(single) == 'preliminary (< 3 seeds)'
    two = render.compare(ctx, '15k', [60.0, 60.5, 61.0], [50.0, 50.5])
    assert render.claim_verdict(two, +1).startswith('preliminary')
    seeded = render.compare(ctx, '15k', [56.0, 56.5, 56.2], [50.0, 50.1, 50.2])
    assert seeded['finding'] and not seeded['preliminary']
    # under another protocol than the paper's: reproduced or not at this budget, never confirmed / contradicted
    assert render.claim_verdict(seeded, +1) == 'reproduced at this budget'
    assert render.claim_verdict(seeded, -1) == render.claim_verdict(seeded, 0) == 'not reproduced at this budget'
    assert render.claim_verdict(seeded, 'any') == 'reproduced at this budget'
    assert render.claim_verdict(seeded, +1, paper_protocol=True) == 'confirmed'
    assert render.claim_verdict(seeded, -1, paper_protocol=True) == 'contradicted'
    close = render.compare(ctx, '15k', [50.0, 50.5, 51.0], [50.0, 50.1, 50.2])
    assert render.claim_verdict(close, +1) == 'inconclusive (within noise)' and render.verdict_text(close) == 'within noise'


def test_no_claim_row_says_confirmed_or_contradicted_for_a_protocol_the_paper_did_not_use(ctx):
    """Issue 62: every claim row names how its protocol differs from the paper's; its verdict says so."""
    table = render.table_claims(ctx)
    for claim, paper, cid, sign, extra in render.CLAIMS:
        protocol = render.protocol_difference(cid)
        assert protocol and "the paper's" in protocol and protocol in table, cid
        assert render.claim_verdict_of(ctx, cid) not in ('confirmed', 'contradicted'), cid
    assert 'a grid the paper does not use' in render.protocol_difference('grid_euler24')
    assert render.claim_verdict_of(ctx, 'odevit_vs_vit_odevit_params') == 'not reproduced at this budget'
    assert '**confirmed**' not in table and '**contradicted**' not in table
    readme = render.render((render.TEMPLATES / 'README.md.in').read_text(), ctx, 'README.md.in')
    assert 'contradicted' not in readme and 'confirmed' not in readme


def test_seeds_join_their_arm():
    arms = render.by_seed([('a', {}), ('a@seed2', {}), ('b@seed1', {'seed': 1})], lambda r: 1.0)
    assert arms == {'a': {0: 1.0, 2: 1.0}, 'b': {1: 1.0}}
    assert render.fmt_arm([50.0]) == '50.00 (single run)'
    assert render.fmt_arm([51.16, 51.16]) == '51.16, 51.16 (2 runs)'  # no "± 0.00" from two runs
    assert render.fmt_arm([50.0, 51.0, 52.0]) == '51.00 ± 1.00 (3 seeds)'


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


def test_distillation_study_renders_its_arms_and_chooses_on_held_out(tmp_path):
    import json
    empty = render.Context(results=tmp_path)
    assert render.distill(empty, 'scratch') == [] and render.run_comparison(empty, 'distill_traj_uniform_vs_scratch') is None
    assert render._distill_choice(empty).startswith('not yet made')

    def study(held_out):  # arm -> held-out top-1 per seed; test top-1 = held-out - 1
        runs = {f'{arm}@seed{s}': {'arm': arm, 'seed': s, 'held_out_top1': v, 'test_top1': v - 1, 'train_s': 100. + s,
                                   'environment': {'machine': 'cpu'}}
                for arm, vs in held_out.items() for s, v in enumerate(vs)}
        budget = '2 epochs of 45,000 images, selected on 5,000 held-out images, scored on 10,000 test images'
        (tmp_path / 'distillation_study.json').write_text(json.dumps({'runs': runs, 'budget': budget}))
        return render.Context(results=tmp_path)

    flat = {arm: [50.0, 50.5, 51.0] for arm in render.DISTILL_ARMS}
    ctx = study({**flat, 'traj_softmax': [60.0, 60.5, 61.0]})
    assert render.distill(ctx, 'traj_softmax', 'held_out') == [60.0, 60.5, 61.0] and render.distill(ctx, 'scratch')[0] == 49.0
    assert render._distill_choice(ctx).startswith('trajectory distillation wins: `traj_softmax`')
    # beating scratch is not enough: logit KD is as good
    ctx = study({**flat, 'traj_softmax': [60.0, 60.5, 61.0], 'logit_kd': [60.0, 60.2, 60.4]})
    assert render._distill_choice(ctx).endswith('the best arm on held-out is `traj_softmax`')
    # a trajectory arm worse than scratch beyond the floor does not win, whatever logit KD does
    ctx = study({**flat, 'traj_softmax': [40.0, 40.5, 41.0], 'traj_uniform': [40.0, 40.5, 41.0],
                 'traj_arclength': [40.0, 40.5, 41.0], 'traj_no_attention': [40.0, 40.5, 41.0], 'logit_kd': [30.0] * 3})
    assert 'does not win' in render._distill_choice(ctx) and render._distill_choice(ctx).endswith('`scratch`')
    # within the held-out floor (2.00 at 5,000 images): no win; the best arm by mean is named
    ctx = study({**flat, 'traj_uniform': [51.5, 52.0, 52.5]})
    assert 'does not win' in render._distill_choice(ctx) and render._distill_choice(ctx).endswith('`traj_uniform`')
    table = render.table_distillation_study(ctx)
    assert '| `traj_uniform` |' in table and '101 s on cpu, ? at a time |' in table and '×' not in table
    c = render.run_comparison(ctx, 'distill_traj_uniform_vs_scratch')
    assert c['delta'] == pytest.approx(1.5) and not c['preliminary'] and c['budget'] == '45k-distill'
    assert render.BUDGETS['heldout-45k-distill'].images(ctx) == 5000 and render.BUDGETS['45k-distill'].images(ctx) == 10000
    # arms short of 3 runs: the rule waits, with the bound their missing runs would have to reach (each pair's own
    # range floor here: logit_kd's 52-53, 1 point; traj_uniform's 45-50 is no part of it) and, only where that is out
    # of reach, the best complete arm
    partial = {**flat, 'traj_uniform': [45.0, 50.0, 47.0], 'traj_softmax': [40.0, 40.5],
               'traj_no_attention': [40.0, 40.5], 'logit_kd': [52.0, 52.5, 53.0]}
    text = render._distill_choice(study(partial))
    need = 3 * (52.5 + 1.0) - 80.5  # 80.0 % for the third run
    assert text.startswith('not yet made') and f'at least {need:.1f} % (`traj_softmax`)' in text
    assert text.endswith('go ahead with `logit_kd`, the best arm on held-out with its runs complete')
    close = render._distill_choice(study({**partial, 'traj_softmax': [57.0, 58.0], 'traj_no_attention': [57.0, 58.0]}))
    assert 'at least 45.5 %' in close and 'go ahead' not in close  # within reach of the best run (58) + the floor


def test_the_trained_grid_sentence_gives_its_margins_as_preliminary(tmp_path):
    import json

    def sweep(*seeds):  # per seed: (euler 6, euler 8, euler 24) test top-1
        runs = {('odevit_tiny_cifar' + (f'@seed{s}' if s else '')): {
            'seed': s, 'kwargs': {'steps': 6}, 'test_top1': e6, 'inference_grid_sweep': {'images': 2000, 'test_top1': [
                {'method': 'euler', 'steps': 6, 'top1': e6}, {'method': 'euler', 'steps': 8, 'top1': e8},
                {'method': 'euler', 'steps': 24, 'top1': e24}]}} for s, (e6, e8, e24) in enumerate(seeds)}
        (tmp_path / 'accuracy_vs_params.json').write_text(json.dumps({'runs': runs}))
        return render._grid_best_own(render.Context(results=tmp_path))

    assert sweep() == 'none of its seeds (no sweep run)'
    assert sweep((50.0, 49.0, 45.0), (51.0, 50.5, 44.0), (50.5, 50.0, 46.0)).startswith(
        '3 of its 3 seeds, by +0.50 to +1.00 points over the next-best grid (one margin per seed')
    far = sweep((50.0, 49.0, 45.0), (50.5, 50.0, 44.0), (50.2, 55.5, 46.0))  # a seed whose trained grid lost by 5.3
    assert far.startswith('2 of its 3 seeds, by -5.30 to +1.00') and far.endswith('preliminary)')
    assert 'within' not in far and 'floor' not in far  # single-run margins carry no verdict


def test_bench_readme_times_a_run_per_machine_when_its_rows_name_theirs(tmp_path):
    import json
    rows = [{'train_s': s, 'environment': {'machine': m}} for s, m in ((50, 'gpu'), (70, 'gpu'), (1200, 'cpu'))]
    (tmp_path / 'x.json').write_text(json.dumps({'rows': rows}))
    assert render.runtime(render.Context(results=tmp_path), 'x') == \
        '20 min (one run in the JSON; on cpu); 60 s per run (median of 2 runs in the JSON; on gpu)'
    (tmp_path / 'x.json').write_text(json.dumps({'environment': {'machine': 'cpu'}, 'rows': [{'train_s': 30}]}))
    assert render.runtime(render.Context(results=tmp_path), 'x') == '30 s (one run in the JSON; on cpu)'
    # rows of an earlier command beside rows that record their own machine: not the top's (the latest command's)
    rows = [{'train_s': 30}, {'train_s': 40, 'environment': {'machine': 'gpu'}}]
    (tmp_path / 'x.json').write_text(json.dumps({'environment': {'machine': 'gpu'}, 'rows': rows}))
    assert render.runtime(render.Context(results=tmp_path), 'x') == \
        '30 s (one run in the JSON; on a machine not recorded); 40 s (one run in the JSON; on gpu)'


def test_where_measured_names_gpu_studies_mixed_ones_and_files_without_a_machine(tmp_path):
    import json
    cpu, gpu = 'Intel(R) Xeon(R), 2 CPU cores, 2 threads', '1x NVIDIA H200'
    for name, machines in (('a', [gpu, gpu]), ('b', [gpu, cpu]), ('c', [cpu]), ('d', [None])):
        rows = [{'environment': {'machine': m} if m else {}} for m in machines]
        (tmp_path / f'{name}.json').write_text(json.dumps({'rows': rows}))
    assert render._where_measured(render.Context(results=tmp_path)) == (
        '2-core CPUs (Intel(R) Xeon(R)), except the rows of 1 studies measured on 1x NVIDIA H200: `a`, and some rows of '
        '`b` (each row names its machine); the rows of 1 older file name no machine: `d`')


def test_distillation_arms_are_the_study_scripts():
    import ast
    tree = ast.parse((ROOT / 'bench' / 'distillation_study.py').read_text())
    arms = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], 'id', '') == 'ARMS')
    assert [k.value for k in arms.keys] == list(render.DISTILL_ARMS)


def test_a_study_on_two_machines_names_which_rows_ran_where():
    env = lambda m: {'environment': {'machine': m, 'torch': '2.x'}}  # noqa: E731
    assert render._which_rows_where({'runs': {'a': env('gpu'), 'b': env('cpu'), 'c': env('cpu')}}) == \
        ' (`a` on gpu, torch 2.x; the other rows on cpu, torch 2.x)'
    assert render._which_rows_where({'runs': {'a': env('cpu'), 'b': env('cpu')}}) == ''
    seeded = {'a': env('gpu'), 'a@seed1': env('cpu'), 'b': {}, 'b@seed1': env('cpu'), 'b@seed2': env('cpu')}
    assert render._which_rows_where({'runs': seeded}) == (' (`a` seed 0 on gpu, torch 2.x; `b` seed 0 on a machine not '
                                                          'recorded; the other rows on cpu, torch 2.x)')


def test_the_random_depth_sentence_follows_the_verdicts(monkeypatch):
    c = lambda d, finding, seeds=3: {'delta': d, 'floor': 2.0, 'finding': finding, 'preliminary': seeds < 3,  # noqa: E731
                                     'seeds': (seeds, seeds)}
    cases = {'anytime_random_at_S': c(0.5, False), 'anytime_random_at_3': c(-2.5, True), 'anytime_random_at_24': c(1.0, False)}
    monkeypatch.setattr(render, 'run_comparison', lambda ctx, cid: cases[cid])
    assert render._anytime_random_verdict(None) == \
        'its differences from fixed-grid training exceed the floor at 3 (-2.50, floor 2.00) (3 seeds; the rows above)'
    cases['anytime_random_at_3'] = c(-1.0, False)
    assert render._anytime_random_verdict(None).startswith('none of its differences')
    cases['anytime_random_at_S'] = c(0.5, False, seeds=2)
    assert 'preliminary' in render._anytime_random_verdict(None)


def test_the_sgd_sentence_is_read_from_the_rows(tmp_path):
    import json
    row = lambda name, batch, updates, rc: {'name': name, 'batch': batch, 'updates_planned': updates,  # noqa: E731
                                            'returncode': rc, 'nan_or_inf': False}
    rows = [row('a defaults', 128, 30, 1), row('a defaults_clip1', 128, 30, 0), row('b defaults', 128, 30, 0),
            row('a defaults', 32, 1406, 0), row('b defaults', 32, 1406, 0)]
    rows[0]['error'] = 'FloatingPointError: the weights hold NaN/Inf'  # blew up (another error would not count)
    (tmp_path / 'recipes_no_nan.json').write_text(json.dumps({'rows': rows}))
    ctx = render.Context(results=tmp_path)
    assert render._sgd_peak_lr(ctx) == ('each of the 2 models trained for a full epoch at batch 32 completed it; `a` blew up at batch 128 unless '
                                        '`--clip-grad 1` (single runs, at batch 32 and 128 only)')
    rows[1]['returncode'], rows[4]['returncode'] = 1, 1
    (tmp_path / 'recipes_no_nan.json').write_text(json.dumps({'rows': rows}))
    assert render._sgd_peak_lr(render.Context(results=tmp_path)).startswith(
        '`a` of the 2 models trained for a full epoch at batch 32 completed it; `a` blew up at batch 128 (single')


def test_the_docs_show_the_commands_the_rows_record(tmp_path):
    import json
    rows = [{'v': 1, 'environment': {'command': 'python a.py --seed 0'}},
            {'v': 2, 'environment': {'command': 'python a.py --seed 1'}},
            {'v': 3, 'environment': {'command': 'python a.py --seed 0'}}]
    (tmp_path / 'x.json').write_text(json.dumps({'environment': {'command': 'python a.py --seed 1'}, 'rows': rows}))
    ctx = render.Context(results=tmp_path)
    assert render.recorded_commands(ctx, 'x') == '`python a.py --seed 0`; `python a.py --seed 1`'
    assert render.recorded_commands(ctx, 'x', lambda r: r['v'] == 2) == '`python a.py --seed 1`'
    rows.append({'v': 4})  # a row without its record: said, not lent the file's (last) command
    (tmp_path / 'x.json').write_text(json.dumps({'environment': {'command': 'python a.py --seed 1'}, 'rows': rows}))
    assert render.recorded_commands(render.Context(results=tmp_path), 'x') == \
        '`python a.py --seed 0`; `python a.py --seed 1`; 1 row: command not recorded'
    (tmp_path / 'x.json').write_text(json.dumps({'environment': {'command': 'python b.py'}, 'grid': [1, 2]}))
    assert render.recorded_commands(render.Context(results=tmp_path), 'x') == '`python b.py`'  # no rows: one command


def test_a_cycles_model_kwargs_are_its_commands_which_replace_the_configs_whole():
    config = 'train_configs/release_odevit_tiny_cifar10_cycle_logit_kd.yaml'
    assert render.command_model_kwargs(f'python -m timm_odevit.train --config {config} --epochs 4') == {
        'steps': 6, 'train_depth': [3, 9]}
    command = f"python -m timm_odevit.train --config {config} --model-kwargs steps=6 'train_depth=[3,6]' --epochs 4"
    assert render.command_model_kwargs(command) == {'steps': 6, 'train_depth': [3, 6]}
    assert render.command_model_kwargs(f'train.py --config {config} --model-kwargs steps=6') == {'steps': 6}
    with pytest.raises(ValueError, match='key=value'):
        render.command_model_kwargs(f'train.py --config {config} --model-kwargs steps 6')
    # as argparse reads it: the = form, the last of two, a short flag ends the list, empty words skipped
    assert render.command_model_kwargs(f'train.py --config {config} --model-kwargs=steps=3') == {'steps': 3}
    assert render.command_model_kwargs(
        f"train.py --config {config} --model-kwargs steps=3 --model-kwargs steps=4 '' -b 128") == {'steps': 4}
    assert render.command_model_kwargs(f'train.py --model odevit_tiny_cifar --config {config}')['steps'] == 6


def test_a_refused_cycle_shows_its_held_out_depths_beside_the_cycle_it_started_from(tmp_path):
    import json
    import shutil
    tag = 'odevit_tiny_cifar.c10'
    (tmp_path / tag).mkdir()
    for name in ('config.json', 'README.md', 'record.json'):
        shutil.copy(ROOT / 'release' / tag / name, tmp_path / tag / name)
    ctx = render.Context(release=tmp_path)
    before = render.table_release_depths(ctx)
    record = json.loads((tmp_path / tag / 'record.json').read_text())
    last = record['cycles'][-1]['cycle']
    # sample numbers: those the session note of 2026-12-05 gives for a cycle refused before the log was kept
    depths = {'3': 73.8, '4': 77.16, '6': 78.64, '8': 78.42, '12': 77.6, '16': 77.32, '24': 76.66}
    refusal = {'release': tag, 'from_cycle': last, 'started_from_sha256': record['weights_sha256'], 'released': False,
               'recorded': {'commit': 'abc', 'date': '2026-12-05T10:55:14+00:00'}, 'epochs': 16,
               'command': 'python -m timm_odevit.train --config train_configs/release_odevit_tiny_cifar10_cycle_logit_kd.yaml'
                          " --model-kwargs steps=6 'train_depth=[3,6]' --epochs 16",
               'criterion': {'val_top1_at_depth': depths, 'images': 5000, 'mean_gain': 0.8657,
                             'required_mean_gain': 1.4158}}
    log = tmp_path / f'{tag}.refused.json'
    log.write_text(json.dumps([refusal, {k: v for k, v in refusal.items() if k != 'criterion'}]))
    lines = render.table_release_depths(ctx).splitlines()
    row = [r for r in lines if 'refused' in r]
    # one row: the anytime refusal (a plain one has no depths); cycle 5 has its own held-out row, so no 'before' row
    assert len(lines) == len(before.splitlines()) + 1 and len(row) == 1
    assert (f'held-out, a cycle after {last}, refused (2026-12-05; 16 epochs at 3–6 steps; mean +0.87, needed > '
            '1.42) | 5,000 |') in row[0]
    assert '| 73.8 | 77.2 | 78.6 | 78.4 | 77.6 | 77.3 | 76.7 | 2.0 | -4.8 |' in row[0]  # + spread 4-24, 3 steps - best
    for other in ({'from_cycle': last - 1}, {'started_from_sha256': '0' * 64}, {'release': 'bvit_tiny_cifar.c10'},
                  {'from_cycle': None, 'started_from_sha256': None}):
        log.write_text(json.dumps([dict(refusal, **other)]))  # a log of another record: an error, not misplaced rows
        with pytest.raises(ValueError, match='record.json does not hold'):
            render.table_release_depths(ctx)


def test_the_files_with_a_dirty_commit_and_no_diff_are_named(tmp_path):
    import json
    env = {'machine': 'cpu', 'commit': 'abc+dirty'}
    (tmp_path / 'old.json').write_text(json.dumps({'environment': env, 'rows': [{'environment': env}]}))
    kept = {**env, 'diff_sha256': '0' * 64, 'diff': 'bench/results/diffs/0.diff'}
    (tmp_path / 'new.json').write_text(json.dumps({'environment': kept, 'rows': [{'environment': kept}]}))
    text = render._dirty_without_diff(render.Context(results=tmp_path))
    assert text.startswith('1 of the 2 result files') and text.endswith(': `old`')
    (tmp_path / 'old.json').unlink()
    assert render._dirty_without_diff(render.Context(results=tmp_path)).startswith('no result file')


def test_choices_first_made_on_test_images_are_said_where_the_numbers_are(ctx):
    """Issue 62: the release table, each release card (its record's first_chosen_on_test) and the distillation
    section say which choices were first made on the test images their numbers are measured on."""
    import json
    table = render.table_releases(ctx)
    assert 'chosen first on these test images' in table
    for tag, words in (('odevit_tiny_cifar.c10', ('`train_depth` [3, 9]', 'lr 1e-3')),
                       ('bvit_tiny_cifar.c10', ('deep supervision',)),
                       ('odevit_tiny_convstem_cifar.c10_pnp', ("when the teacher's training stopped",))):
        first = json.loads((render.RELEASE / tag / 'record.json').read_text())['first_chosen_on_test']
        card = (render.RELEASE / tag / 'README.md').read_text()
        assert all(any(w in c for c in first) for w in words), tag
        assert all(c in card for c in first) and all(render.short_choice(c) in table for c in first), tag
    results = render.render((render.TEMPLATES / 'results.md.in').read_text(), ctx, 'results.md.in')
    distillation = results[results.index('## Trajectory distillation vs scratch'):]
    assert 'a stopping rule on the test split' in distillation.split('\n## ')[0]  # in that section
    readme = render.render((render.TEMPLATES / 'README.md.in').read_text(), ctx, 'README.md.in')
    assert "its teacher's training stopped on a test-split target" in readme


def test_plug_and_play_study_renders_its_arms_and_decides_the_release_on_held_out(tmp_path):
    import json
    empty = render.Context(results=tmp_path)
    assert render.pnp(empty, 'free') == [] and render.run_comparison(empty, 'pnp_plug_and_play_vs_free') is None
    assert render._pnp_release(empty) == ('not yet decided: `plug_and_play` / `free` have 0 / 0 of the 3 runs each '
                                          'that it needs')

    def study(held_out):  # arm -> held-out top-1 per seed; test top-1 = held-out - 1
        runs = {f'{arm}@seed{s}': {'arm': arm, 'seed': s, 'held_out_top1': v, 'test_top1': v - 1, 'train_s': 100. + s,
                                   'trainable_params': 443136, 'environment': {'machine': 'cpu'}}
                for arm, vs in held_out.items() for s, v in enumerate(vs)}
        budget = '3 epochs of 45,000 images, selected on 5,000 held-out images, scored on 10,000 test images'
        (tmp_path / 'plug_and_play.json').write_text(json.dumps({'runs': runs, 'budget': budget}))
        return render.Context(results=tmp_path, release=release)

    release = tmp_path / 'release'  # no release folder yet
    release.mkdir()

    ctx = study({'free': [50.0, 50.5], 'plug_and_play': [60.0, 60.5, 61.0]})
    assert render._pnp_release(ctx).startswith('not yet decided: `plug_and_play` / `free` have 3 / 2 of the 3 runs')
    ctx = study({'free': [50.0]})  # no comparison yet: the runs each arm has
    assert render._pnp_release(ctx).startswith('not yet decided: `plug_and_play` / `free` have 0 / 1 of the 3 runs')
    ctx = study({'free': [50.0, 50.5, 51.0], 'plug_and_play': [60.0, 60.5, 61.0]})
    floor = render.run_comparison(ctx, 'pnp_heldout_plug_and_play_vs_free')['floor']  # sampling 5,000 images
    assert render._pnp_release(ctx) == ('`plug_and_play` beats `free` on held-out images by +10.00, beyond the floor '
                                        f'({floor:.2f}): it is to be released')
    release = tmp_path / 'released'  # the release named, every cycle's config, its test top-1 against the free one's

    def write(tag, top1, *cycles):
        (release / tag).mkdir(parents=True, exist_ok=True)
        (release / tag / 'record.json').write_text(json.dumps({'test': {'top1': top1, 'images': 10000}, 'cycles': [
            {'cycle': i, 'epochs': n, 'command': f'python -m tools.train --config {c} --epochs {n}'}
            for i, (c, n) in enumerate(cycles)]}))
    write('odevit_tiny_cifar.c10', 77.05, ('free.yaml', 56))
    for top1, says in ((79.18, 'above the free release `odevit_tiny_cifar.c10` (77.05; +2.13 on the same 10,000 test '
                                'images, beyond the 1.17 that sampling them gives a difference of two single runs; one '
                                "run each, so the releases' seed-to-seed spread is not in it)"),
                       (77.50, 'level with the free release `odevit_tiny_cifar.c10` (77.05; +0.45 on the same 10,000 '
                                'test images, within the 1.19'),
                       (76.00, 'level with the free release `odevit_tiny_cifar.c10` (77.05; -1.05 on the same 10,000 '
                                'test images, within the 1.20'),
                       (75.00, 'not yet above (its cycles go on) the free release `odevit_tiny_cifar.c10` (77.05; '
                                '-2.05 on the same 10,000 test images, beyond the 1.21')):
        write(render.PNP_TAG, top1, ('traj.yaml', 2), ('traj.yaml', 1), ('kd.yaml', 10))
        released = render._pnp_release(study({'free': [50.0, 50.5, 51.0], 'plug_and_play': [60.0, 60.5, 61.0]}))
        assert released.endswith(f"released as `{render.PNP_TAG}` (warm-restart cycles from the study's run: "
                                 f'`traj.yaml`, then `kd.yaml`): test top-1 {top1:.2f} after 3 cycle(s), 13 epochs '
                                 f"beyond the study run's, " + released.split("beyond the study run's, ")[1])
        assert says in released, released
    release = render.RELEASE
    assert render.run_comparison(ctx, 'pnp_plug_and_play_vs_free')['delta'] == pytest.approx(10.0)
    assert render.BUDGETS['heldout-45k-pnp'].images(ctx) == 5000 and render.BUDGETS['45k-pnp'].images(ctx) == 10000
    ctx = study({'free': [50.0, 50.5, 51.0], 'plug_and_play': [51.0, 51.5, 52.0]})  # +1.00, within the 2.00 floor
    floor = render.run_comparison(ctx, 'pnp_heldout_plug_and_play_vs_free')['floor']
    assert render._pnp_release(ctx).endswith(f'(Δ = +1.00, N = {floor:.2f}): no release')
    ctx = study({'free': [60.0, 60.5, 61.0], 'plug_and_play': [50.0, 50.5, 51.0]})  # a loss beyond the floor
    floor = render.run_comparison(ctx, 'pnp_heldout_plug_and_play_vs_free')['floor']
    assert render._pnp_release(ctx).endswith(f'(Δ = -10.00, N = {floor:.2f}): no release')
    table = render.table_plug_and_play(ctx)
    assert '| `plug_and_play` |' in table and '| 443,136 | 3 |' in table and '| 101 s on cpu |' in table
    assert '| `shell_ce` | the same student, cross-entropy only | – | 0 | – | – | – |' in table
    # rows from two machines (a session draws its machine): the docs say which rows ran where
    runs = json.loads((tmp_path / 'plug_and_play.json').read_text())
    runs['runs']['free@seed0']['environment']['machine'] = 'other cpu'
    (tmp_path / 'plug_and_play.json').write_text(json.dumps(runs))
    where = render.trained_on(render.Context(results=tmp_path), 'plug_and_play')
    assert where.startswith('trained on ')
    assert '(`free` seed 0 on other cpu, torch ?; the other rows on cpu, torch ?)' in where


def test_plug_and_play_release_training_counts_its_teacher_and_meets_the_free_release_at_its_epochs(ctx, tmp_path):
    import shutil
    chain = render.teacher_cycles(ctx, 'release/teacher_convstem_cifar10_cycle6')  # args.yaml's initial_checkpoint
    assert [t['folder'][-6:] for t in chain] == ['cycle0', 'cycle1', 'cycle2', 'cycle3', 'cycle4', 'cycle6']
    assert sum(t['epochs'] for t in chain) == 38 and chain[0]['seconds'] == 11831.6
    text = render._pnp_training(ctx)
    assert text.startswith(f'Training so far: `{render.PNP_TAG}` has had ')
    assert "its teacher's weights, which are its frozen shell and give the targets it is distilled to, took 38 " in text
    pnp_epochs = int(re.search(r'has had (\d+) epochs', text).group(1))
    release = tmp_path / 'release'  # a free release whose cycle 1 is its first with the student's epochs or more
    for tag in (render.PNP_TAG, 'odevit_tiny_cifar.c10'):
        shutil.copytree(render.RELEASE / tag, release / tag)
    for name in (t['folder'] for t in chain):
        shutil.copytree(render.RELEASE / name, release / name)
    free = json.loads((release / 'odevit_tiny_cifar.c10' / 'record.json').read_text())
    free['cycles'] = [dict(free['cycles'][0], epochs=pnp_epochs - 1, test_top1=60.0),
                      dict(free['cycles'][1], epochs=1, test_top1=70.0), dict(free['cycles'][2], epochs=5)]
    (release / 'odevit_tiny_cifar.c10' / 'record.json').write_text(json.dumps(free))
    want = f'scored 70.00 after its cycle 1 ({pnp_epochs} epochs, its first with {pnp_epochs} or more) and '
    assert want in render._pnp_training(render.Context(release=release))
    free['cycles'] = free['cycles'][:2]  # its first with as many epochs is its last: said once
    (release / 'odevit_tiny_cifar.c10' / 'record.json').write_text(json.dumps(free))
    assert f'scored {free["test"]["top1"]:.2f} after {pnp_epochs} epochs (' in render._pnp_training(
        render.Context(release=release))
    free['cycles'] = free['cycles'][:1]  # fewer epochs than the student's
    (release / 'odevit_tiny_cifar.c10' / 'record.json').write_text(json.dumps(free))
    assert f'scored (only {pnp_epochs - 1} epochs, fewer than {pnp_epochs}) ' in render._pnp_training(
        render.Context(release=release))
    assert '; cycle 5 distilled from the same teacher).' in text  # the free release's logit-KD cycle, its config's


def test_teacher_cycles_refuse_a_lineage_not_on_record(tmp_path):
    def run(name, start):
        (tmp_path / name).mkdir()
        (tmp_path / name / 'args.yaml').write_text(f'epochs: 2\ninitial_checkpoint: {start}\n')
        (tmp_path / name / 'train_time.json').write_text('{"seconds": 60.0, "hardware": "cpu"}')
    run('t0', '')
    run('t1', 'release/t0/model.safetensors')
    ctx = render.Context(release=tmp_path)
    assert render.teacher_cycles(ctx, 'release/t1') == [dict(folder=f't{i}', epochs=2, seconds=60.0, hardware='cpu')
                                                        for i in (0, 1)]
    run('t2', 'output/train/teacher/model_best.pth.tar')  # a run folder, not kept
    with pytest.raises(ValueError, match='the training behind its weights is not on record'):
        render.teacher_cycles(ctx, 'release/t2')
    run('t3', 'release/t3/model.safetensors')
    with pytest.raises(ValueError, match='in a loop at t3'):
        render.teacher_cycles(ctx, 'release/t3')


def test_the_docs_say_the_plug_and_play_gain_is_the_shells_only_while_the_study_says_so(ctx):
    """README.md.in and results.md.in state it in words; these are the verdicts the words rest on."""
    assert render.run_comparison(ctx, 'pnp_shell_ce_vs_free')['finding']
    assert not render.run_comparison(ctx, 'pnp_plug_and_play_vs_shell_ce')['finding']
    assert not render.run_comparison(ctx, 'pnp_heldout_plug_and_play_vs_shell_ce')['finding']


def test_plug_and_play_arms_are_the_study_scripts():
    import ast
    tree = ast.parse((ROOT / 'bench' / 'plug_and_play.py').read_text())
    arms = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], 'id', '') == 'ARMS')
    assert [k.value for k in arms.keys] == list(render.PNP_ARMS)


def test_the_distillation_rows_name_the_machines_their_seed_0_ran_on(ctx):
    """DISTILL_GPU_SEED0 is what distillation_study.json records: the arms whose seed 0 ran on a GPU, the rest not."""
    runs = ctx.json('distillation_study')['runs'].values()
    gpu = {r['arm'] for r in runs if 'NVIDIA' in r['environment']['machine']}
    assert gpu == set(render.DISTILL_GPU_SEED0)
    assert all(r['seed'] == 0 for r in runs if 'NVIDIA' in r['environment']['machine'])
    machines = {('H200' if 'H200' in r['environment']['machine'] else r['environment']['machine'],
                 r['environment']['torch'].split('+')[0].rsplit('.', 1)[0]) for r in runs}
    assert machines == {('H200', '2.11'), ('Intel(R) Xeon(R) Processor, 2 CPU cores, 2 threads', '2.14')}
    assert 'an H200 (torch 2.11), the other runs on a 2-core Xeon (torch 2.14)' in render._distill_caveats('scratch', 'x')


def test_pnp_reruns_compare_each_row_run_again_with_the_row_it_replaced(tmp_path):
    assert render._pnp_reruns(render.Context(results=tmp_path)) == ''

    def row(arm, held_out, test, machine):
        return {'arm': arm, 'seed': 0, 'held_out_top1': held_out, 'test_top1': test, 'environment': {'machine': machine}}
    (tmp_path / 'plug_and_play.json').write_text(json.dumps({
        'runs': {'free': row('free', 56.140001, 55.92, 'xeon'), 'shell_ce': row('shell_ce', 69.5, 69.0, 'xeon')},
        'replaced_runs': {'free': [row('free', 56.14, 55.92, 'epyc')], 'shell_ce': [row('shell_ce', 69.6, 69.3, 'epyc')]},
    }))
    assert render._pnp_reruns(render.Context(results=tmp_path)) == (
        '`free` seed 0, `shell_ce` seed 0 first ran on epyc and were run again on xeon so that every row is from one '
        'machine: 1 of 2 gave the same held-out and test top-1 to the last digit; `shell_ce` seed 0: held-out / test '
        '69.60 / 69.30 → 69.50 / 69.00 (the first rows: `replaced_runs` in the JSON).')
    assert render._machines(render.Context(results=tmp_path), 'plug_and_play') == ['xeon']  # replaced rows: not the study's
