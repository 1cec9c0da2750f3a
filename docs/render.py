"""Render README.md and docs/results.md from their templates and the result files (`make docs`).

Every number in the generated docs comes from a file: bench/results/*.json (written by the scripts
in bench/) or the release folders (release/<model>.<tag>/README.md, record.json). Prose lives in
docs/templates/*.md.in; this script only fills it in. It imports neither torch nor timm_odevit (json
and the standard library only), so it runs in seconds.

Template syntax (see docs/templates/README.md for how to add a section):

    {{ table NAME }}          a whole line: the markdown table that TABLES[NAME](ctx) renders
    {{ FILE:PATH }}           a value in bench/results/FILE.json; PATH is dot-separated keys or list
    {{ FILE:PATH|FMT }}       indices (keys may contain '@'); FMT a Python format spec (default: as is)
    {{ =NAME }}               a derived value (a difference, a mean, a verdict): VALUES[NAME](ctx)
    {{ =NAME|FMT }}           (comparison values: =ID.delta / .floor / .margin / .t / .verdict / .a / .b / .summary /
                              .result, ID in COMPARISONS; .result is "Δ = ... (N, margin, t), verdict" or "not yet
                              measured" while an arm has no run)
    {{ =runtime.SCRIPT }}     the median time per run recorded in bench/results/SCRIPT.json (train.py's when recorded)
    {# ... #}                 a comment, dropped (may span lines)

    python docs/render.py            # writes README.md, docs/results.md and bench/README.md
    python docs/render.py --check    # exits 1 when a written file would change (what CI checks via git diff)
"""
import argparse
import ast
import hashlib
import json
import math
import os
import pathlib
import re
import statistics
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / 'bench' / 'results'
RELEASE = ROOT / 'release'
TEMPLATES = ROOT / 'docs' / 'templates'
OUTPUTS = {'README.md.in': ROOT / 'README.md', 'results.md.in': ROOT / 'docs' / 'results.md',
           'bench_README.md.in': ROOT / 'bench' / 'README.md'}


# ---- loading ----------------------------------------------------------------------------------------
class Context:
    """Cached access to the result files."""

    def __init__(self, results: pathlib.Path = RESULTS, release: pathlib.Path = RELEASE):
        self.results, self.release, self._cache = results, release, {}

    def json(self, name: str) -> dict:
        if name not in self._cache:
            path = self.results / f'{name}.json'
            if not path.exists():
                raise FileNotFoundError(f'{path} is missing: run the bench script that writes it')
            self._cache[name] = json.loads(path.read_text())
        return self._cache[name]

    def lookup(self, name: str, path: str):
        value = self.json(name)
        for part in path.split('.'):
            value = value[int(part)] if isinstance(value, list) else value[part]
        return value


def base_name(key: str) -> str:
    return key.rsplit('@seed', 1)[0]


def seed_of(key: str, row: Optional[dict] = None) -> int:
    if row is not None and row.get('seed') is not None:
        return int(row['seed'])
    return int(key.rsplit('@seed', 1)[1]) if '@seed' in key else 0


def by_seed(items: Sequence[Tuple[str, dict]], value: Callable[[dict], float]) -> Dict[str, Dict[int, float]]:
    """{recipe: {seed: value}} from (key, row) pairs keyed 'recipe' / 'recipe@seedN'."""
    out: Dict[str, Dict[int, float]] = {}
    for key, row in items:
        out.setdefault(base_name(key), {})[seed_of(key, row)] = value(row)
    return out


# ---- statistics: the one rule -------------------------------------------------------------------------
def mean(v: Sequence[float]) -> float:
    return statistics.fmean(v)


def spread(v: Sequence[float]) -> float:
    return max(v) - min(v) if v else 0.


def fmt_arm(v: Sequence[float], nd: int = 2) -> str:
    """'50.44 ± 0.02 (3 seeds)' (mean ± sample std) from >= 3 runs; fewer are listed as they are:
    '47.58 (single run)', '51.16, 51.16 (2 runs)' (a std of two runs is no measure of spread)."""
    if len(v) == 1:
        return f'{v[0]:.{nd}f} (single run)'
    if len(v) < MIN_SEEDS:
        return ', '.join(f'{x:.{nd}f}' for x in v) + f' ({len(v)} runs)'
    return f'{mean(v):.{nd}f} ± {statistics.stdev(v):.{nd}f} ({len(v)} seeds)'


MIN_SEEDS = 3  # runs per arm below which a comparison is preliminary: no verdict word


class Budget:
    """A training budget and the repeated runs of one recipe measured at it; ``images``: how many images scored its
    runs (n of the binomial floor), read from its result file (a callable of the Context) or given."""

    def __init__(self, key: str, label: str, images: Union[int, Callable[['Context'], int]],
                 repeats: Callable[['Context'], Dict[str, List[float]]], scored_on: str = ''):
        self.key, self.label, self._images, self._repeats, self.scored_on = key, label, images, repeats, scored_on

    def images(self, ctx: Context) -> int:
        return self._images(ctx) if callable(self._images) else self._images

    def images_label(self, ctx: Context) -> str:
        return f'{self.images(ctx):,}' + (f' ({self.scored_on})' if self.scored_on else '')

    def repeats(self, ctx: Context) -> Dict[str, List[float]]:
        return {k: v for k, v in self._repeats(ctx).items() if len(v) >= 2}


def _acc_arms(ctx: Context) -> Dict[str, Dict[int, float]]:
    return by_seed(ctx.json('accuracy_vs_params')['runs'].items(), lambda r: r['test_top1'])


def _parity_stability_arms(ctx: Context) -> Dict[str, Dict[int, float]]:
    par = ctx.json('odevit_parity')['rows']
    stab = ctx.json('odevit_stability')['rows']
    arms: Dict[str, Dict[int, float]] = {}
    for r in par:
        arms.setdefault(f'odevit_parity {r["variant"]}', {})[r['seed']] = r['test_top1']
    arms.update({f'odevit_stability {k}': v for k, v in
                 by_seed([(r['variant'], r) for r in stab], lambda r: r['test_top1']).items()})
    return arms


def _repeats_10k(ctx: Context) -> Dict[str, List[float]]:
    # odevit_parity's and odevit_stability's arms are not pooled: parity's "ours" has the reference's spectral-norm
    # head (the like-for-like pair), stability's timm's classifier init
    return {k: list(v.values()) for k, v in _parity_stability_arms(ctx).items()}


def _distill_small_arms(ctx: Context) -> Dict[str, Dict[int, float]]:
    return by_seed(ctx.json('distillation_small')['results'].items(), lambda r: r['top1'])


def _rows_by(name: str, key: Callable[[dict], str], value: str = 'test_top1'):
    def arms(ctx: Context) -> Dict[str, List[float]]:
        rows = ctx.json(name)['rows']
        return {k: list(v.values())  # a diverged run has no score; any other row without the value is an error
                for k, v in by_seed([(key(r), r) for r in rows if 'diverged' not in r], lambda r: r[value]).items()}
    return arms


def optional_json(ctx: Context, name: str) -> Optional[dict]:
    """A result file that may not exist yet (a study not run): None instead of an error."""
    try:
        return ctx.json(name)
    except FileNotFoundError:
        return None


def step_robust(ctx: Context, trained: int, at: Optional[int] = None) -> List[float]:
    """step_robustness: top-1 per seed of the models trained at ``trained`` Euler steps, evaluated at ``at``."""
    d = optional_json(ctx, 'step_robustness')
    rows = [] if d is None else [r for r in d['rows'] if r['train_steps'] == trained]
    return [r['test_top1'][str(at or trained)] for r in rows if str(at or trained) in r['test_top1']]


def anytime_study(ctx: Context, model: str) -> Optional[dict]:
    """anytime_training's study of one model (None: not run yet)."""
    return ((optional_json(ctx, 'anytime_training') or {}).get('studies') or {}).get(model)


def anytime_arm(ctx: Context, model: str, arm: str, at: Optional[int] = None, split: str = 'test') -> List[float]:
    """anytime_training: top-1 per seed of one arm, evaluated at depth ``at`` (default: the trained depth) on the
    test images or (``split='holdout'``) on the held-out training images."""
    study = anytime_study(ctx, model)
    if study is None:
        return []
    key, field = str(at or study['trained_depth']), f'{split}_top1'
    return [r[field][key] for r in study['rows'] if r['arm'] == arm and key in r.get(field, {})]


def _grid_study_repeats(ctx: Context) -> Dict[str, List[float]]:
    """The 3k-image budget's repeated recipes: head_init_accuracy's variants, step_robustness's training grids and
    anytime_training's arms (each at its own training grid)."""
    out = _rows_by('head_init_accuracy', lambda r: r['variant'])(ctx)
    d = optional_json(ctx, 'step_robustness')
    for steps in sorted({r['train_steps'] for r in (d or {}).get('rows', [])}):
        out[f'step_robustness trained at {steps}'] = step_robust(ctx, steps)
    for model, study in ((optional_json(ctx, 'anytime_training') or {}).get('studies') or {}).items():
        for arm in dict.fromkeys(r['arm'] for r in study['rows']):
            out[f'anytime_training {model} {arm}'] = anytime_arm(ctx, model, arm)
    return out


def _budget_images(name: str, path: str, pattern: str, per_class: bool = False,
                   classes: int = 10) -> Callable[[Context], int]:
    """An image count stated in a result file's budget string at ``path`` (``per_class``: a count per class, times
    ``classes``)."""
    def value(ctx: Context) -> int:
        n = int(re.search(pattern, ctx.lookup(name, path)).group(1).replace(',', ''))
        return n * classes if per_class else n
    return value


def _test_images(name: str, path: str = 'budget') -> Callable[[Context], int]:
    """The test images a result file's budget string says its runs were scored on."""
    return _budget_images(name, path, r'test on (?:all )?([\d,]+) test images')


def _held_out_images(name: str) -> Callable[[Context], int]:
    """The held-out training images a result file's budget string says its runs were also scored on."""
    return _budget_images(name, 'budget', r'held out: the next ([\d,]+) train images')


BUDGETS = {b.key: b for b in [
    Budget('45k', '45k images, 2 epochs (`accuracy_vs_params`)',
           _test_images('accuracy_vs_params', 'runs.odevit_tiny_cifar.budget'),
           lambda ctx: {k: list(v.values()) for k, v in _acc_arms(ctx).items()}),
    Budget('45k_grid', '45k images, 2 epochs, re-integrated on other grids (`accuracy_vs_params` inference grid sweep)',
           lambda ctx: ctx.lookup('accuracy_vs_params', 'runs.odevit_tiny_cifar.inference_grid_sweep.images'),
           lambda ctx: {f'{m} {n}': grid(ctx, 'odevit_tiny_cifar', m, n) for m, n in (('euler', 6),)}),
    Budget('10k', '10k images, 2 epochs (`odevit_parity`, `odevit_stability`)', _test_images('odevit_stability'),
           _repeats_10k),
    Budget('15k', '15k images, 2 epochs (`odevit_ablation`)', _test_images('odevit_ablation'),
           _rows_by('odevit_ablation', lambda r: r['variant'])),
    Budget('heldout-15k', '15k images, 2 epochs, scored on held-out training images (`odevit_ablation`)',
           _held_out_images('odevit_ablation'), _rows_by('odevit_ablation', lambda r: r['variant'], 'holdout_top1'),
           'held out'),
    Budget('4k-distill', '4k images, 3 epochs (`distillation_small`)', _test_images('distillation_small'),
           lambda ctx: {k: list(v.values()) for k, v in _distill_small_arms(ctx).items()}),
    Budget('4k-bvit', '4k images, 2 epochs (`bvit_field_and_solver`)', _test_images('bvit_field_and_solver'),
           _rows_by('bvit_field_and_solver', lambda r: f'{r["field"]} {r["method"]} {r["steps"]}')),
    Budget('8k', '8k images, 3 epochs (`deep_supervision_horizon`)', _test_images('deep_supervision_horizon'),
           lambda ctx: {k: list(v.values()) for k, v in by_seed(
               ctx.json('deep_supervision_horizon')['runs'].items(),
               lambda r: _at_iteration(r, ctx.json('deep_supervision_horizon')['trained_iterations'])).items()}),
    Budget('3k-head', '3k images, 3 epochs (`head_init_accuracy`, `step_robustness`, `anytime_training`)',
           _test_images('head_init_accuracy'),
           _grid_study_repeats),
    Budget('heldout-8k', '8k images, 3 epochs, scored on held-out training images (`deep_supervision_horizon`)',
           _held_out_images('deep_supervision_horizon'), lambda ctx: _heldout_horizon_repeats(ctx), 'held out'),
    Budget('heldout-3k', '3k images, 3 epochs, scored on held-out training images (`anytime_training`)',
           lambda ctx: ctx.lookup('anytime_training', 'studies.odevit_tiny_cifar.holdout_images'),
           lambda ctx: _heldout_anytime_repeats(ctx), 'held out'),
    Budget('45k-distill', '45k images, 2 epochs, timm train.py (`distillation_study`)',
           _budget_images('distillation_study', 'budget', r'scored on ([\d,]+) test images'),
           lambda ctx: {arm: distill(ctx, arm) for arm in DISTILL_ARMS}),
    Budget('heldout-45k-distill', '45k images, 2 epochs, timm train.py, scored on the held-out training images '
           '(`distillation_study`)',
           _budget_images('distillation_study', 'budget', r'selected on ([\d,]+) held-out images'),
           lambda ctx: {arm: distill(ctx, arm, 'held_out') for arm in DISTILL_ARMS}, 'held out'),
    Budget('45k-pnp', '45k images, 3 epochs, timm train.py (`plug_and_play`)',
           _budget_images('plug_and_play', 'budget', r'scored on ([\d,]+) test images'),
           lambda ctx: {arm: pnp(ctx, arm) for arm in PNP_ARMS}),
    Budget('heldout-45k-pnp', '45k images, 3 epochs, timm train.py, scored on the held-out training images '
           '(`plug_and_play`)',
           _budget_images('plug_and_play', 'budget', r'selected on ([\d,]+) held-out images'),
           lambda ctx: {arm: pnp(ctx, arm, 'held_out') for arm in PNP_ARMS}, 'held out'),
    Budget('recipe', '10k images, 5 epochs, timm train.py (`recipe_study`; validation top-1)',
           _budget_images('recipe_study', 'rows.0.budget', r'first (\d+)/class of val/', per_class=True),
           _rows_by('recipe_study', lambda r: f'{r["model"]} {r["candidate"]}', 'best_val_top1'), 'validation'),
]}


def _at_iteration(run: dict, point: int, curve: str = 'accuracy_vs_iterations') -> float:
    return next(c['top1'] for c in run[curve] if c['point'] == point)


def _heldout_horizon_repeats(ctx: Context) -> Dict[str, List[float]]:
    """deep_supervision_horizon's runs at T, scored on held-out training images."""
    return {f'deep_supervision_horizon {k}': ds(ctx, k, split='holdout')
            for k in dict.fromkeys(base_name(k) for k in ctx.json('deep_supervision_horizon')['runs'])}


def _heldout_anytime_repeats(ctx: Context) -> Dict[str, List[float]]:
    """anytime_training's arms at their training depth, scored on held-out training images."""
    return {f'anytime_training {model} {arm}': anytime_arm(ctx, model, arm, split='holdout')
            for model, study in ((optional_json(ctx, 'anytime_training') or {}).get('studies') or {}).items()
            for arm in dict.fromkeys(r['arm'] for r in study['rows'])}


def binomial_floor(top1: float, images: int) -> float:
    """2·√(2p(1−p)/n) in points: twice the standard error of a one-run-vs-one-run difference that sampling
    n test images alone gives at top-1 p (%)."""
    p = min(max(top1 / 100., 0.), 1.)
    return 200. * math.sqrt(2. * p * (1. - p) / images)


def budget_noise(ctx: Context, budget: str) -> dict:
    """What noise looks like at a budget (shown, not used by any verdict): the largest range (max − min) over >= 3
    runs of one of its repeated recipes, which one, and :func:`binomial_floor` at the mean top-1 of its repeated runs
    (50 % where it has none) and its own number of scored images."""
    b = BUDGETS[budget]
    reps = b.repeats(ctx)
    widest, recipe = max(((spread(v), k) for k, v in reps.items() if len(v) >= MIN_SEEDS), default=(0., None))
    runs = [x for v in reps.values() for x in v]
    top1 = mean(runs) if runs else 50.
    return {'range': widest, 'recipe': recipe, 'top1': top1, 'sampling': binomial_floor(top1, b.images(ctx))}


def floor(ctx: Context, budget: str, a: Sequence[float], b: Sequence[float]) -> Tuple[float, str]:
    """The noise floor N of comparing arms ``a`` and ``b`` at ``budget``, and where it comes from: the larger of
    either arm's range over its runs (an arm of >= 3 runs of one recipe at one evaluation point) and
    :func:`binomial_floor` at the two arms' mean top-1 and the budget's own number of scored images. Nothing else
    enters it: no other arm, no other budget (the rule stated in docs/results.md)."""
    images = BUDGETS[budget].images(ctx)
    top1 = mean(list(a) + list(b))
    sampling = binomial_floor(top1, images)
    widest, side = max(((spread(v), side) for side, v in (('A', a), ('B', b)) if len(v) >= MIN_SEEDS),
                       default=(0., None))
    if widest >= sampling:
        return widest, f'range of {side}'
    return sampling, f'sampling {images:,} images at {top1:.1f} %'


def welch_t(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """Welch's t of mean(a) − mean(b) (None while an arm has fewer than 2 runs; ±inf when neither arm varies)."""
    if min(len(a), len(b)) < 2:
        return None
    delta = mean(a) - mean(b)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    if se == 0:
        return math.copysign(math.inf, delta) if delta else 0.
    return delta / se


def fmt_t(t: Optional[float]) -> str:
    if t is None:
        return '–'
    return ('+' if t > 0 else '-' if t < 0 else '') + ('∞' if math.isinf(t) else f'{abs(t):.1f}')


def compare(ctx: Context, budget: str, a: Sequence[float], b: Sequence[float]) -> dict:
    """Δ = mean(a) − mean(b), its floor N (:func:`floor`), the margin |Δ| − N (> 0: a finding) and Welch's t."""
    delta = mean(a) - mean(b)
    n, how = floor(ctx, budget, a, b)
    return {'delta': delta, 'floor': n, 'floor_from': how, 'margin': abs(delta) - n, 't': welch_t(a, b),
            'finding': abs(delta) > n, 'preliminary': min(len(a), len(b)) < MIN_SEEDS, 'seeds': (len(a), len(b))}


def verdict_text(c: dict) -> str:
    if c['preliminary']:
        return 'preliminary (< 3 seeds)'
    return 'finding' if c['finding'] else 'within noise'


def fmt_noise(c: dict) -> str:
    """'N 2.54, margin +1.55, t -7.9': the comparison's floor, the margin |Δ| − N and Welch's t."""
    return f'N {c["floor"]:.2f}, margin {c["margin"]:+.2f}, t {fmt_t(c["t"])}'


# ---- comparisons: the arms each claim and finding is read from ----------------------------------------
def acc(ctx: Context, name: str) -> List[float]:
    return list(_acc_arms(ctx).get(name, {}).values())


def acc_val(ctx: Context, name: str) -> List[float]:
    return list(by_seed(ctx.json('accuracy_vs_params')['runs'].items(), lambda r: r['val_top1']).get(name, {}).values())


def stab(ctx: Context, variant: str) -> List[float]:
    return list(_parity_stability_arms(ctx).get(f'odevit_stability {variant}', {}).values())


def parity(ctx: Context, variant: str) -> List[float]:
    return list(_parity_stability_arms(ctx).get(f'odevit_parity {variant}', {}).values())


def ablation(ctx: Context, variant: str, split: str = 'test') -> List[float]:
    return _rows_by('odevit_ablation', lambda r: r['variant'], f'{split}_top1')(ctx).get(variant, [])


def dsmall(ctx: Context, name: str) -> List[float]:
    return list(_distill_small_arms(ctx).get(name, {}).values())


def bvit_fs(ctx: Context, field: str, method: str) -> List[float]:
    return [r['test_top1'] for r in ctx.json('bvit_field_and_solver')['rows'] if r['field'] == field and r['method'] == method]


def four_t(ctx: Context) -> int:
    """deep_supervision_horizon's point 4·T, four times the trained iterations."""
    return 4 * ctx.json('deep_supervision_horizon')['trained_iterations']


def ds(ctx: Context, run: str, point: Optional[int] = None, split: str = 'test') -> List[float]:
    """deep_supervision_horizon: top-1 per seed of one run at iteration ``point`` (default T), on the test images or
    (``split='holdout'``) on the held-out training images."""
    d = ctx.json('deep_supervision_horizon')
    point, curve = point or d['trained_iterations'], ('holdout_' if split == 'holdout' else '') + 'accuracy_vs_iterations'
    return [_at_iteration(r, point, curve) for k, r in d['runs'].items() if base_name(k) == run and curve in r]


def recipe(ctx: Context, candidate: str) -> List[float]:
    return [r['best_val_top1'] for r in ctx.json('recipe_study')['rows'] if r['candidate'] == candidate]


def head_init(ctx: Context, variant: str) -> List[float]:
    return [r['test_top1'] for r in ctx.json('head_init_accuracy')['rows'] if r['variant'] == variant]


def grid(ctx: Context, name: str, method: str, steps: int) -> List[float]:
    out = []
    for k, r in ctx.json('accuracy_vs_params')['runs'].items():
        if base_name(k) == name and r.get('inference_grid_sweep'):
            out += [g['top1'] for g in r['inference_grid_sweep']['test_top1'] if g['method'] == method and g['steps'] == steps]
    return out


DISTILL_ARMS = {  # distillation_study's arms (bench/distillation_study.py ARMS): the teacher's part in each
    'scratch': 'none (from scratch)',
    'traj_uniform': 'trajectory distillation, the paper\'s loss, uniform time mapping',
    'traj_arclength': 'the same, arc-length time mapping',
    'traj_softmax': 'the same, the reference\'s softmax time mapping',
    'traj_no_attention': 'trajectory, uniform mapping, without the attention-mass term',
    'logit_kd': 'timm\'s logit KD (`--kd-distill-type logit`)',
}
DISTILL_STUDY_CMD = 'python bench/distillation_study.py --teacher release/teacher_convstem_cifar10_cycle6 --seeds 0 1 2'


def distill(ctx: Context, arm: str, split: str = 'test') -> List[float]:
    """distillation_study: top-1 per seed (seed order) of one arm, on the test images or (``split='held_out'``) on
    the held-out training images train.py selected its epoch on."""
    runs = (optional_json(ctx, 'distillation_study') or {}).get('runs', {}).values()
    return [v for _, v in sorted((r['seed'], r[f'{split}_top1']) for r in runs if r['arm'] == arm)]


DISTILL_GPU_SEED0 = ('scratch', 'traj_uniform', 'traj_arclength')  # their seed 0 is distillation_study's H200 row


def _distill_caveats(a: str, b: str) -> str:
    """What a distillation_study comparison row must say: the trajectory arms' labels from their 2nd epoch only, and
    the arms whose seed 0 ran on another machine than their other seeds."""
    notes = []
    if a.startswith('traj_') or b.startswith('traj_'):
        notes.append('trajectory arms: CE from the 2nd of 2 epochs, a label handicap')
    gpu = [arm for arm in (a, b) if arm in DISTILL_GPU_SEED0]
    if gpu:
        notes.append(f'seed 0 of {" and ".join(gpu)} on an H200 (torch 2.11), the other runs on a 2-core Xeon (torch 2.14)')
    return f' ({"; ".join(notes)})' if notes else ''


PNP_ARMS = {  # bench/plug_and_play.py's arms: the student and the teacher's part
    'free': '`odevit_tiny_cifar` from scratch (width 256, 6 Euler steps): the paper\'s baseline',
    'plug_and_play': 'the shell student: the teacher\'s patch embedding, [CLS], position embedding, final norm and '
                     'classifier (frozen), a random ODE-ViT field at its width 192, 6 Euler steps; the paper\'s loss',
    'shell_ce': 'the same student, cross-entropy only',
    'shell_logit_kd': 'the same student, timm\'s logit KD (`--kd-distill-type logit`)',
    'free_traj_ce0': '`odevit_tiny_cifar` with the paper\'s loss, CE from the first epoch',
}
PNP_PAIRS = [
    ('plug_and_play', 'free'),
    ('shell_ce', 'free'),
    ('plug_and_play', 'shell_ce'),
    ('plug_and_play', 'shell_logit_kd'),
    ('shell_logit_kd', 'shell_ce'),
    ('free_traj_ce0', 'free'),
]
PNP_CMD = 'python bench/plug_and_play.py --seeds 0 1 2'


def pnp(ctx: Context, arm: str, split: str = 'test') -> List[float]:
    """plug_and_play: top-1 per seed (seed order) of one arm, on the test images or (``split='held_out'``) on the
    held-out training images train.py selected its epoch on."""
    runs = (optional_json(ctx, 'plug_and_play') or {}).get('runs', {}).values()
    return [v for _, v in sorted((r['seed'], r[f'{split}_top1']) for r in runs if r['arm'] == arm)]


def _pnp_reruns(ctx: Context) -> str:
    """The plug & play rows run again on the study's machine (``--again``) against the rows they replaced."""
    d = optional_json(ctx, 'plug_and_play') or {}
    pairs = [(key, old, d['runs'][key]) for key, olds in d.get('replaced_runs', {}).items() for old in olds]
    if not pairs:
        return ''
    def scores(row: dict) -> Tuple[float, float]:
        return round(row['held_out_top1'], 2), round(row['test_top1'], 2)
    named = {key: f'`{base_name(key)}` seed {seed_of(key)}' for key, _, _ in pairs}
    same = [key for key, old, new in pairs if scores(old) == scores(new)]
    moved = [f'{named[key]}: held-out / test {"%.2f / %.2f" % scores(old)} → {"%.2f / %.2f" % scores(new)}'
             for key, old, new in pairs if scores(old) != scores(new)]
    first, again = (' / '.join(sorted({row['environment']['machine'] for row in rows}))
                    for rows in ([old for _, old, _ in pairs], [new for _, _, new in pairs]))
    return (f"{', '.join(named.values())} first ran on {first} and were run again on {again} so that "
            f"every row is from one machine: {len(same)} of {len(pairs)} gave the same held-out and test top-1 to the "
            'last digit' + (f"; {'; '.join(moved)}" if moved else '') + ' (the first rows: `replaced_runs` in the JSON).')


DISTILL_PAIRS = [('traj_uniform', 'scratch'), ('traj_arclength', 'scratch'), ('traj_softmax', 'scratch'),
                 ('traj_uniform', 'traj_no_attention'), ('logit_kd', 'scratch'), ('traj_uniform', 'logit_kd')]  # (A, B) compared
ANYTIME_ARMS = {'fixed': 'fixed S (today\'s training)', 'random': 'random depth per update, S − w … S + w',
                'incremental': 'coarse to fine: S − w, then S + w', 'deep_supervision': 'fixed S, deep supervision at T/4 … T'}

# (id, what is compared, budget, arm A, arm B, command)
COMPARISONS = [
    ('odevit_vs_vit_odevit_params', '`odevit_tiny_cifar` vs the discrete ViT of **its** parameters (`vit_odevit_tiny_cifar_params_matched`)', '45k',
     lambda c: acc(c, 'odevit_tiny_cifar'), lambda c: acc(c, 'vit_odevit_tiny_cifar_params_matched'),
     'python bench/accuracy_vs_params.py --models odevit_tiny_cifar vit_odevit_tiny_cifar_params_matched --seed N'),
    ('odevit_vs_vit_odevit_flops', '`odevit_tiny_cifar` vs the discrete ViT of its FLOPs at 6 steps (`vit_odevit_tiny_cifar_flops_matched`)', '45k',
     lambda c: acc(c, 'odevit_tiny_cifar'), lambda c: acc(c, 'vit_odevit_tiny_cifar_flops_matched'),
     'python bench/accuracy_vs_params.py --models odevit_tiny_cifar vit_odevit_tiny_cifar_flops_matched --seed N'),
    ('bvit_vs_vit_params', '`bvit_tiny_cifar` vs the discrete ViT of its parameters (`vit_tiny_cifar_params_matched`)', '45k',
     lambda c: acc(c, 'bvit_tiny_cifar'), lambda c: acc(c, 'vit_tiny_cifar_params_matched'),
     'python bench/accuracy_vs_params.py --models bvit_tiny_cifar vit_tiny_cifar_params_matched --seed N'),
    ('bvit_vs_vit_flops', '`bvit_tiny_cifar` vs the discrete ViT of its FLOPs (`vit_tiny_cifar_flops_matched`)', '45k',
     lambda c: acc(c, 'bvit_tiny_cifar'), lambda c: acc(c, 'vit_tiny_cifar_flops_matched'),
     'python bench/accuracy_vs_params.py --models bvit_tiny_cifar vit_tiny_cifar_flops_matched --seed N'),
    ('head_init_45k', 'timm\'s classifier init (the default) vs the reference\'s spectral-norm head', '45k',
     lambda c: acc(c, 'odevit_tiny_cifar'), lambda c: acc(c, 'odevit_tiny_cifar_spectral_head'),
     'python bench/accuracy_vs_params.py --models odevit_tiny_cifar odevit_tiny_cifar_spectral_head --seed N'),
    ('layernorm_vs_centernorm_45k', 'LayerNorm field vs CenterNorm field (both without final norm, spectral head)', '45k',
     lambda c: acc(c, 'odevit_tiny_cifar_layernorm'), lambda c: acc(c, 'odevit_tiny_cifar_spectral_head'),
     'python bench/accuracy_vs_params.py --models odevit_tiny_cifar_layernorm odevit_tiny_cifar_spectral_head --seed N'),
    ('grid_euler24', 'trained on euler 6, evaluated on euler 24 vs on euler 6 (the sweep\'s test images)', '45k_grid',
     lambda c: grid(c, 'odevit_tiny_cifar', 'euler', 24), lambda c: grid(c, 'odevit_tiny_cifar', 'euler', 6),
     'python bench/accuracy_vs_params.py --models odevit_tiny_cifar --seed N'),
    ('grid_rk4_6', 'trained on euler 6, evaluated with rk4 6 vs euler 6 (the sweep\'s test images)', '45k_grid',
     lambda c: grid(c, 'odevit_tiny_cifar', 'rk4', 6), lambda c: grid(c, 'odevit_tiny_cifar', 'euler', 6),
     'python bench/accuracy_vs_params.py --models odevit_tiny_cifar --seed N'),
    ('parity', 'ours with the reference\'s spectral-norm head vs the authors\' `ViTNeuralODE`', '10k',
     lambda c: parity(c, 'ours_spectral_head'), lambda c: parity(c, 'reference'),
     'python bench/odevit_parity.py --reference-dir ODE-ViT --variants ours_spectral_head reference --seeds 0 1 2'),
    ('layernorm_vs_centernorm_10k', 'LayerNorm field vs CenterNorm field', '10k',
     lambda c: stab(c, 'layernorm_field'), lambda c: stab(c, 'centernorm_field'),
     'python bench/odevit_stability.py --seed N'),
    ('final_norm_10k', 'CenterNorm field with a final LayerNorm (`final_norm=True`) vs without', '10k',
     lambda c: stab(c, 'centernorm_field_final_norm'), lambda c: stab(c, 'centernorm_field'),
     'python bench/odevit_stability.py --variants centernorm_field_final_norm'),
    ('ablation_vs_vit', 'paper default vs the discrete ViT of its parameters (`vit_odevit_tiny_cifar_params_matched`)',
     '15k', lambda c: ablation(c, 'default'), lambda c: ablation(c, 'discrete_vit_odevit_params'),
     'python bench/odevit_ablation.py --variants default discrete_vit_odevit_params --seed N'),
    ('ablation_lr', 'lr 3e-4 vs the default lr 1e-3', '15k',
     lambda c: ablation(c, 'lr_3e-4'), lambda c: ablation(c, 'default'),
     'python bench/odevit_ablation.py --variants lr_3e-4 --seed N'),
    ('ablation_layernorm', 'LayerNorm field vs CenterNorm field', '15k',
     lambda c: ablation(c, 'layernorm_field'), lambda c: ablation(c, 'default'),
     'python bench/odevit_ablation.py --variants layernorm_field --seed N'),
    ('distill_small', 'trajectory-distilled `odevit_tiny_cifar` (4 steps) vs from scratch', '4k-distill',
     lambda c: dsmall(c, 'odevit_distilled'), lambda c: dsmall(c, 'odevit_scratch'),
     'python bench/distillation_small.py --seed N'),
    ('self_distill', 'odeified ViT: distilled from its own original vs CE fine-tuning', '4k-distill',
     lambda c: dsmall(c, 'odeified_self_distilled'), lambda c: dsmall(c, 'odeified_ce_finetune'),
     'python bench/distillation_small.py --seed N'),
    ('naive_field', 'bViT ODE: naive field ż = B(z) vs state-subtracted ż = B(z) − z (Euler 12)', '4k-bvit',
     lambda c: bvit_fs(c, 'naive', 'euler'), lambda c: bvit_fs(c, 'state_subtracted', 'euler'),
     'python bench/bvit_field_and_solver.py --train-per-class 400 --seed N'),
    ('rk4_vs_euler', 'bViT ODE: rk4 3 steps vs euler 12 steps (12 block evaluations each)', '4k-bvit',
     lambda c: bvit_fs(c, 'state_subtracted', 'rk4'), lambda c: bvit_fs(c, 'state_subtracted', 'euler'),
     'python bench/bvit_field_and_solver.py --train-per-class 400 --seed N'),
    ('midpoint_vs_euler', 'bViT ODE: midpoint 6 steps vs euler 12 steps (12 block evaluations each)', '4k-bvit',
     lambda c: bvit_fs(c, 'state_subtracted', 'midpoint'), lambda c: bvit_fs(c, 'state_subtracted', 'euler'),
     'python bench/bvit_field_and_solver.py --train-per-class 400 --seed N'),
    ('ds_at_T', 'deep supervision vs plain, at the training horizon T', '8k',
     lambda c: ds(c, 'deep_supervision'), lambda c: ds(c, 'plain'), 'python bench/deep_supervision_horizon.py --seed N'),
    ('ds_at_4T', 'deep supervision vs plain, at 4·T iterations', '8k',
     lambda c: ds(c, 'deep_supervision', four_t(c)),
     lambda c: ds(c, 'plain', four_t(c)),
     'python bench/deep_supervision_horizon.py --seed N'),
    ('plain_T_vs_4T', 'plain recurrence at 4·T vs at T', '8k',
     lambda c: ds(c, 'plain', four_t(c)),
     lambda c: ds(c, 'plain'), 'python bench/deep_supervision_horizon.py --seed N'),
    *[(f'recipe_{cid}', f'release recipe {change}', 'recipe', lambda c, k=candidate: recipe(c, k),
       lambda c: recipe(c, 'base'), 'cd bench && python recipe_study.py --data ../data/cifar10_holdout --models '
       f'odevit_tiny_cifar{flags}')
      for cid, candidate, change, flags in (('no_jitter', 'no_jitter', 'without colour jitter vs with', ''),
                                            ('mixup', 'mixup_cutmix', '+ mixup/cutmix vs without', ''),
                                            ('randaug', 'randaug', '+ RandAugment vs without', ''),
                                            ('ema', 'ema', '+ EMA vs without', ' --candidates ema'))],
    ('head_init', "ODE-ViT's classifier init: timm's trunc-normal 0.02 (the default) vs the reference's spectral norm 1 "
     "(`head_init='spectral'`)", '3k-head', lambda c: head_init(c, 'ours'), lambda c: head_init(c, 'ours_spectral_head'),
     'python bench/head_init_accuracy.py --variants ours ours_spectral_head'),
    ('sqrtdepth', "ODE-ViT with the depth scale carried by the weights (`sqrtdepth`) vs as registered", '3k-head',
     lambda c: head_init(c, 'ours_sqrtdepth'), lambda c: head_init(c, 'ours'),
     'python bench/head_init_accuracy.py --variants ours ours_sqrtdepth'),
    ('head_init_vs_reference', "`odevit_tiny_cifar` (default init) vs the authors' `ViTNeuralODE` (their init)", '3k-head',
     lambda c: head_init(c, 'ours'), lambda c: head_init(c, 'reference'),
     'python bench/head_init_accuracy.py --variants ours reference --reference-dir /path/to/ODE-ViT'),
    # anytime depth (issue 29): the step grid of training, then schedules of it at equal training NFE
    ('sr24_vs_sr6', "trained and evaluated at 24 Euler steps (the paper's grid) vs at 6 (the ODE-ViT release's registered grid)", '3k-head',
     lambda c: step_robust(c, 24), lambda c: step_robust(c, 6),
     'python bench/step_robustness.py --train-steps 6 24 --seeds 0 1 2'),
    ('sr6_at24', 'trained at 6 Euler steps: evaluated at 24 vs at 6', '3k-head',
     lambda c: step_robust(c, 6, 24), lambda c: step_robust(c, 6), 'python bench/step_robustness.py --train-steps 6'),
    ('sr24_at6', 'trained at 24 Euler steps: evaluated at 6 vs at 24', '3k-head',
     lambda c: step_robust(c, 24, 6), lambda c: step_robust(c, 24), 'python bench/step_robustness.py --train-steps 24'),
    ('sr24_at3', 'trained at 24 Euler steps: evaluated at 3 vs at 24', '3k-head',
     lambda c: step_robust(c, 24, 3), lambda c: step_robust(c, 24), 'python bench/step_robustness.py --train-steps 24'),
    ('anytime_random_at_S', 'ODE-ViT, a random step count per update (S − w … S + w) vs fixed S, evaluated at S', '3k-head',
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'random'), lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'fixed'),
     'python bench/anytime_training.py --arms fixed random --seeds 0 1 2'),
    ('anytime_incremental_at_S', 'ODE-ViT, coarse to fine (S − w, then S + w steps) vs fixed S, evaluated at S', '3k-head',
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'incremental'), lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'fixed'),
     'python bench/anytime_training.py --arms fixed incremental --seeds 0 1 2'),
    ('anytime_random_at_3', 'ODE-ViT, random step count per update vs fixed S, evaluated at 3 steps', '3k-head',
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'random', 3), lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'fixed', 3),
     'python bench/anytime_training.py --arms fixed random --seeds 0 1 2'),
    ('anytime_random_at_24', 'ODE-ViT, random step count per update vs fixed S, evaluated at 24 steps', '3k-head',
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'random', 24), lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'fixed', 24),
     'python bench/anytime_training.py --arms fixed random --seeds 0 1 2'),
    ('anytime_incremental_at_3', 'ODE-ViT, coarse to fine vs fixed S, evaluated at 3 steps', '3k-head',
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'incremental', 3), lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'fixed', 3),
     'python bench/anytime_training.py --arms fixed incremental --seeds 0 1 2'),
    ('anytime_incremental_at_24', 'ODE-ViT, coarse to fine vs fixed S, evaluated at 24 steps', '3k-head',
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'incremental', 24),
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'fixed', 24),
     'python bench/anytime_training.py --arms fixed incremental --seeds 0 1 2'),
    *[(f'anytime_random_w4_at_{at}', f'ODE-ViT, random step count per update from S − 4 … S + 4 vs fixed S, evaluated '
       f'at {at} steps', '3k-head', lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'random_w4', at),
       lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'fixed', at),
       'python bench/anytime_training.py --arms random --width 4 --seeds 0 1 2') for at in (3, 6)],
    ('anytime_random_w4_vs_w3_at_3', 'ODE-ViT, random step count from S − 4 … S + 4 vs from S − 3 … S + 3, evaluated '
     'at 3 steps', '3k-head', lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'random_w4', 3),
     lambda c: anytime_arm(c, 'odevit_tiny_cifar', 'random', 3),
     'python bench/anytime_training.py --arms random --width 4 --seeds 0 1 2'),
    # bViT: iterations as the dial (trained horizon T = 12)
    *[(f'bvit_anytime_{arm}_at_{at}', f'bViT, {ANYTIME_ARMS[arm]} vs fixed T, evaluated at {at} iterations', '3k-head',
       lambda c, arm=arm, at=at: anytime_arm(c, 'bvit_tiny_cifar', arm, at),
       lambda c, at=at: anytime_arm(c, 'bvit_tiny_cifar', 'fixed', at),
       f'python bench/anytime_training.py --model bvit_tiny_cifar --arms fixed {arm} --grids 2 3 4 6 8 12 16 24 48')
      for arm in ('random', 'incremental', 'deep_supervision') for at in (3, 12, 48)],
    *[(f'distill_{a}_vs_{b}', f'`odevit_tiny_cifar` with the convstem teacher: {a} vs {b}{_distill_caveats(a, b)}',
       '45k-distill',
       lambda c, a=a: distill(c, a), lambda c, b=b: distill(c, b), DISTILL_STUDY_CMD) for a, b in DISTILL_PAIRS],
    *[(f'pnp_{a}_vs_{b}', f'plug & play study: `{a}` vs `{b}`', '45k-pnp', lambda c, a=a: pnp(c, a),
       lambda c, b=b: pnp(c, b), PNP_CMD) for a, b in PNP_PAIRS],
    *[(f'pnp_heldout_{a}_vs_{b}', f'plug & play study: `{a}` vs `{b}` (held out)', 'heldout-45k-pnp',
       lambda c, a=a: pnp(c, a, 'held_out'), lambda c, b=b: pnp(c, b, 'held_out'), PNP_CMD) for a, b in PNP_PAIRS],
    # held-out re-checks of the release choices first made on test images (issue 45): the same runs, scored on
    # training images they never trained on
    ('ho_ds_at_T', 'bViT: deep supervision vs plain, at T (held out)', 'heldout-8k',
     lambda c: ds(c, 'deep_supervision', split='holdout'), lambda c: ds(c, 'plain', split='holdout'),
     'python bench/deep_supervision_horizon.py --seed N'),
    ('ho_ds_at_4T', 'bViT: deep supervision vs plain, at 4·T (held out)', 'heldout-8k',
     lambda c: ds(c, 'deep_supervision', four_t(c), 'holdout'),
     lambda c: ds(c, 'plain', four_t(c), 'holdout'),
     'python bench/deep_supervision_horizon.py --seed N'),
    ('ho_plain_T_vs_4T', 'bViT: plain recurrence at 4·T vs at T (held out)', 'heldout-8k',
     lambda c: ds(c, 'plain', four_t(c), 'holdout'),
     lambda c: ds(c, 'plain', split='holdout'), 'python bench/deep_supervision_horizon.py --seed N'),
    *[(f'ho_bvit_ds_at_{at}', f'bViT: deep supervision vs fixed T, at {at} iterations (held out)', 'heldout-3k',
       lambda c, at=at: anytime_arm(c, 'bvit_tiny_cifar', 'deep_supervision', at, 'holdout'),
       lambda c, at=at: anytime_arm(c, 'bvit_tiny_cifar', 'fixed', at, 'holdout'),
       'python bench/anytime_training.py --model bvit_tiny_cifar --grids 2 3 4 6 8 12 16 24 48 --seeds 0 1 2')
      for at in (3, 12, 48)],
    *[(f'ho_random_at_{at}', f'ODE-ViT: random S − 3 … S + 3 (`train_depth` [3, 9]) vs fixed S, at {at} steps (held out)',
       'heldout-3k', lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'random', at, 'holdout'),
       lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'fixed', at, 'holdout'),
       'python bench/anytime_training.py --arms fixed random incremental --seeds 0 1 2') for at in (3, 6, 24)],
    *[(f'ho_w4_vs_w3_at_{at}', f'ODE-ViT: random S − 4 … S + 4 vs S − 3 … S + 3 (w = 4 vs w = 3), at {at} steps '
       '(held out)', 'heldout-3k', lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'random_w4', at, 'holdout'),
       lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'random', at, 'holdout'),
       'python bench/anytime_training.py --arms random --width 4 --seeds 0 1 2') for at in (3, 6, 24)],
    *[(f'ho_incremental_vs_random_at_{at}', f'ODE-ViT: coarse to fine vs random S − 3 … S + 3, at {at} steps (held out)',
       'heldout-3k', lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'incremental', at, 'holdout'),
       lambda c, at=at: anytime_arm(c, 'odevit_tiny_cifar', 'random', at, 'holdout'),
       'python bench/anytime_training.py --arms fixed random incremental --seeds 0 1 2') for at in (3, 6, 24)],
    ('ho_ablation_lr', 'ODE-ViT: lr 3e-4 vs the default lr 1e-3 (held out)', 'heldout-15k',
     lambda c: ablation(c, 'lr_3e-4', 'holdout'), lambda c: ablation(c, 'default', 'holdout'),
     'python bench/odevit_ablation.py --variants default lr_3e-4 --seed N'),
    # issue 44's choice of the release cycles' arm, made on the held-out images
    *[(f'ho_distill_{a}_vs_{b}', f'`odevit_tiny_cifar` with the convstem teacher: {a} vs {b} (held out)'
       f'{_distill_caveats(a, b)}',
       'heldout-45k-distill', lambda c, a=a: distill(c, a, 'held_out'), lambda c, b=b: distill(c, b, 'held_out'),
       DISTILL_STUDY_CMD) for a, b in DISTILL_PAIRS],
]
COMPARISON = {c[0]: c for c in COMPARISONS}
HELDOUT_CHECKS = [c[0] for c in COMPARISONS if c[0].startswith('ho_')]

# The papers' protocols our claim rows are measured against (train_configs/odevit_tiny_cifar10_paper.yaml and
# bvit_*_cifar100.yaml give them in full)
PAPER_PROTOCOL = {
    'ODE-ViT': "the paper's 300 epochs on CIFAR-10 at 224 px (patch 16), 24 grid points (36 when distilled)",
    'bViT': "the paper's 200 epochs on CIFAR-100",
    'Crossroads': "the paper's 200 epochs on CIFAR-100",
}

# The papers' claims: (claim, paper, comparison id, claimed sign of A − B: +1 / -1, 0 for "no difference", or 'any'
# for "A differs from B" in either direction, how our protocol differs from the paper's beyond the budget and
# PAPER_PROTOCOL: '' when only those, None for a row measured under the paper's own protocol)
CLAIMS = [
    ('A student in a trained ViT\'s shell, distilled along its trajectory, beats the free ODE-ViT trained from scratch '
     '(the teacher–student protocol)', 'ODE-ViT', 'pnp_plug_and_play_vs_free', +1,
     'the teacher a 6-block width-192 convstem ViT whose training stopped on a test-split target, not a DINO '
     'ViT-B/16; the student at 32 px on 6 Euler steps, '
     'without registers or dropout, the teacher\'s position embedding frozen and its final norm kept; CE from the '
     'first epoch; AdamW lr 1e-3, batch 128, flips and crops, not lr 1e-4, batch 64, no augmentation'),
    ('ODE-ViT is competitive with a discrete ViT of its parameters', 'ODE-ViT', 'odevit_vs_vit_odevit_params', +1,
     '32 px (patch 4), 6 Euler steps'),
    ('The number of steps can change at inference (robust to the grid): here trained at 6 Euler steps, evaluated at 24',
     'ODE-ViT', 'grid_euler24', 0, 'trained at 6 Euler steps, a grid the paper does not use; 32 px (patch 4)'),
    ('The same at the paper\'s training grid: trained at 24 Euler steps, evaluated at 6', 'ODE-ViT', 'sr24_at6', 0,
     '32 px (patch 4)'),
    ('Recurrence wins at matched parameter memory (bViT above a discrete ViT of its parameters)', 'bViT',
     'bvit_vs_vit_params', +1, 'CIFAR-10'),
    ('The naive field ż = B(z) costs accuracy against the state-subtracted one', 'Crossroads', 'naive_field', -1,
     'CIFAR-10'),
    ('Solver order at matched block evaluations changes accuracy (rk4 3 vs euler 12)', 'Crossroads', 'rk4_vs_euler',
     'any', 'CIFAR-10'),
    ('Deep supervision does not raise accuracy at the training horizon', 'Crossroads', 'ds_at_T', 0, 'CIFAR-10'),
    ('Deep supervision degrades less beyond the training horizon', 'Crossroads', 'ds_at_4T', +1, 'CIFAR-10'),
    ('Plain recurrence loses accuracy beyond the training horizon (the weaker half of the paper\'s claim, which is a '
     'collapse to near chance; how far it falls: the deep-supervision table)', 'Crossroads', 'plain_T_vs_4T', -1,
     'CIFAR-10'),
]
CLAIM = {c[2]: c for c in CLAIMS}


def protocol_difference(cid: str) -> Optional[str]:
    """How the protocol of claim row ``cid`` differs from its paper's (None: it is the paper's protocol)."""
    _, paper, _, _, extra = CLAIM[cid]
    if extra is None:
        return None
    budget = BUDGETS[COMPARISON[cid][2]].label.split(' (')[0]
    return f'{budget} vs {PAPER_PROTOCOL[paper]}' + (f'; here {extra}' if extra else '')


def run_comparison(ctx: Context, cid: str) -> Optional[dict]:
    _, what, budget, fa, fb, cmd = COMPARISON[cid]
    a, b = fa(ctx), fb(ctx)
    if not a or not b:
        return None
    return dict(compare(ctx, budget, a, b), a=a, b=b, what=what, budget=budget, command=cmd)


def claim_verdict(c: Optional[dict], sign: int, paper_protocol: bool = False) -> str:
    """A claim's verdict from its comparison: *confirmed* / *contradicted* only under the paper's own protocol
    (``paper_protocol``); under another, *reproduced* / *not reproduced at this budget*."""
    if c is None:
        return 'not yet measured'
    if c['preliminary']:
        return 'preliminary (< 3 seeds)'
    if not c['finding']:
        return 'inconclusive (within noise)'
    # sign 0 ("no difference"): any finding disagrees; 'any' ("changes accuracy"): any finding agrees
    agrees = sign == 'any' or c['delta'] * sign > 0
    if paper_protocol:
        return 'confirmed' if agrees else 'contradicted'
    return 'reproduced at this budget' if agrees else 'not reproduced at this budget'


def claim_verdict_of(ctx: Context, cid: str) -> str:
    """The verdict of claim row ``cid`` (its comparison, its sign, whether it ran under the paper's protocol)."""
    return claim_verdict(run_comparison(ctx, cid), CLAIM[cid][3], protocol_difference(cid) is None)


# ---- tables ---------------------------------------------------------------------------------------
def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
    return '\n'.join(lines)


def _model_rows(ctx: Context, pred: Callable[[dict], bool]) -> List[dict]:
    return [r for r in ctx.json('model_table')['rows'] if pred(r)]


def _model_name(r: dict) -> str:
    kw = r.get('model_kwargs') or {}
    return f'`{r["model"]}`' + (' (' + ', '.join(f'{k}={v}' for k, v in kw.items()) + ')' if kw else '')


def table_odevit_models(ctx: Context) -> str:
    """One row per registered ODE-ViT: its registered default grid, and the GFLOPs at 6 Euler steps (the grid the
    release `odevit_tiny_cifar.c10` trains on; the other models' recipes use other grids)."""
    rows = _model_rows(ctx, lambda r: r['model'].startswith('odevit_'))
    trained = {r['model']: r for r in rows if (r.get('model_kwargs') or {}).get('steps') == 6}
    out = []
    for r in rows:
        if r.get('model_kwargs'):
            continue
        six = trained.get(r['model'], r if r['steps'] == 6 else None)
        out.append([f'`{r["model"]}`', r['num_classes'], r['dim'], r['heads'], f'{r["mlp_ratio"]:g}', r['patch'],
                    r['tokens'], f'{r["params_M"]:.3f}', f'{r["solver"]} {r["steps"]}', f'{r["gflops"]:.3f}',
                    f'{six["gflops"]:.3f}' if six else '–'])
    return md_table(['model', 'classes', 'D', 'heads', 'mlp ratio', 'patch', 'tokens', 'params (M)', 'registered grid',
                     'GFLOPs', 'GFLOPs at euler 6 (the tiny release\'s grid)'], out)


def table_bvit_models(ctx: Context) -> str:
    rows = _model_rows(ctx, lambda r: not r['model'].startswith('odevit_'))
    return md_table(['model', 'regime', 'D', 'heads', 'mlp ratio', 'patch', 'tokens', 'block evals', 'params (M)', 'GFLOPs'],
                    [[_model_name(r), r['regime'], r['dim'], r['heads'], f'{r["mlp_ratio"]:g}', r['patch'], r['tokens'],
                      r['block_evals'], f'{r["params_M"]:.3f}', f'{r["gflops"]:.3f}'] for r in rows])


def table_odeify_params(ctx: Context) -> str:
    return md_table(['model', 'blocks', 'params before (M)', 'odeify state_subtracted (M)', 'odeify odevit field (M)'],
                    [[r['model'], r['blocks'], f'{r["params_M"]:.2f}', f'{r["state_subtracted_M"]:.2f}', f'{r["odevit_field_M"]:.2f}']
                     for r in ctx.json('odeify_params')['rows']])


# -- releases
def _front_matter_metric(card: str, name: str) -> Optional[float]:
    # a metric item of the card's model-index, its keys in either order (hand-written cards: name, value;
    # huggingface_hub's EvalResult: type, value, name)
    m = (re.search(r'name: ' + re.escape(name) + r'\s*\n\s*value: ([0-9.]+)', card)
         or re.search(r'value: ([0-9.]+)\s*\n\s*name: ' + re.escape(name) + r'\s*\n', card))
    return float(m.group(1)) if m else None


def _card_field(card: str, label: str) -> str:
    for line in card.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if len(cells) == 2 and cells[0].startswith(label):
            return cells[1]
    return '–'


def releases(ctx: Context) -> List[dict]:
    out = []
    for folder in sorted(p for p in ctx.release.iterdir() if (p / 'record.json').exists()):
        card = (folder / 'README.md').read_text() if (folder / 'README.md').exists() else ''
        m = re.search(r'--config (\S+)', card)
        out.append(dict(
            tag=folder.name,
            top1=_front_matter_metric(card, 'Top-1 accuracy'), top5=_front_matter_metric(card, 'Top-5 accuracy'),
            params=_card_field(card, 'parameters'), depth=_card_field(card, 'depth'), epochs=_card_field(card, 'epochs'),
            checkpoint=_card_field(card, 'checkpoint'), wall=_card_field(card, 'training wall time'),
            config=m.group(1) if m else '–',
            cycles=json.loads((folder / 'record.json').read_text()) if (folder / 'record.json').exists() else None))
    return out


def _card_rounded(cycle: dict) -> bool:
    """A cycle whose wall time record.json took from its card's rounded hours (its ``seconds_from``), not from
    train_time.json's seconds (cycle 0 of both releases, commit 0fc0032)."""
    return 'card' in cycle.get('seconds_from', '')


def _one(values: set):
    """The one value a set holds (the releases agree on it), else an error."""
    if len(values) != 1:
        raise ValueError(f'expected one value, got {sorted(values)}')
    return next(iter(values))


def command_args(command: str) -> argparse.Namespace:
    """The ``--config`` and ``--model-kwargs`` of a train.py command line, read as train.py's parser reads them (the
    last of each; None where absent)."""
    import shlex
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument('--config')
    parser.add_argument('--model-kwargs', nargs='*')
    return parser.parse_known_args(shlex.split(command))[0]


def command_model_kwargs(command: str) -> dict:
    """The model kwargs of a train.py command line, read as train.py's parser reads it: the last
    ``--model-kwargs k=v ...`` (values as timm's ParseKwargs reads them), which replaces the config's whole, or else
    the ``model_kwargs`` of its ``--config``."""
    import yaml
    args = command_args(command)
    if args.model_kwargs is None:
        return yaml.safe_load((ROOT / args.config).read_text()).get('model_kwargs') or {}
    kwargs = {}
    for word in filter(None, args.model_kwargs):
        if '=' not in word:
            raise ValueError(f'--model-kwargs takes key=value words, got {word!r} in {command!r}')
        key, value = word.split('=', 1)
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value
    return kwargs


def _release_train_depth(ctx: Context, tag: str) -> str:
    """'lo–hi': the Euler steps per update the release's last cycle drew (``train_depth`` of its command's model
    kwargs, :func:`command_model_kwargs`), or its fixed steps."""
    last = next(r for r in releases(ctx) if r['tag'] == tag)['cycles']['cycles'][-1]
    return _steps_drawn(last['command'], f"{tag}'s last cycle")


def _steps_drawn(command: str, what: str) -> str:
    """'lo–hi': the Euler steps per update a train.py command draws (``train_depth`` of its model kwargs), or its
    fixed steps."""
    kwargs = command_model_kwargs(command)
    if 'train_depth' not in kwargs and 'steps' not in kwargs:
        raise ValueError(f"{what} names neither steps nor train_depth in its model kwargs: {kwargs}")
    return '–'.join(map(str, kwargs['train_depth'])) if kwargs.get('train_depth') else str(kwargs['steps'])


def short_choice(choice: str) -> str:
    """A record's ``first_chosen_on_test`` entry as a table value: the choice, without its explanation."""
    return re.split(r', (?:the|in) ', choice.split(' (')[0])[0]


def table_releases(ctx: Context) -> str:
    """One row per release, every cell a value; what a value rests on is in the release folder (README.md card,
    record.json per cycle, HISTORY.md)."""
    rows = []
    for r in releases(ctx):
        rec = r['cycles']
        images = rec['test']['images']  # the top-1 with its 95 % binomial interval
        top1 = f'{r["top1"]:.2f} ± {_half_width(r["top1"], images):.2f}'
        first = '; '.join(short_choice(c) for c in rec.get('first_chosen_on_test') or []) or 'none'
        prior = rec['cycles'][0].get('started_from_run') or {}  # the run cycle 0 was a warm restart of
        epochs = sum(c['epochs'] for c in rec['cycles'])
        hours = f'{rec["total_seconds"] / 3600:.1f} h' + ('*' if any(map(_card_rounded, rec['cycles'])) else '')
        if 'epochs' in prior:
            epochs = f'{epochs + prior["epochs"]} ({prior["epochs"]} before cycle 0)'
        if prior.get('seconds') is not None:
            before = prior['seconds'] / 3600
            hours = f'{rec["total_seconds"] / 3600 + before:.1f} h ({before:.1f} h before cycle 0)'
        rows.append([
            f'`{r["tag"]}`',
            r['params'],
            r['depth'],
            f'{top1} / {r["top5"]:.2f}',
            first,
            len(rec['cycles']),
            epochs,
            hours,
            f'`{r["config"]}`',
        ])
    header = [
        'tag',
        'params',
        'depth',
        'test top-1 (95 % interval) / top-5 (%)',
        'chosen first on these test images',
        'cycles',
        'epochs',
        'training time (*: with hours a card rounded)',
        'config of the last cycle',
    ]
    return md_table(header, rows)


# -- noise floor and verdicts
def table_noise_floor(ctx: Context) -> str:
    rows = []
    for b in BUDGETS.values():
        reps = b.repeats(ctx)
        noise = budget_noise(ctx, b.key)
        detail = '; '.join(f'{k}: {", ".join(f"{x:.2f}" for x in v)} '
                           + (f'(range {spread(v):.2f})' if len(v) >= MIN_SEEDS else f'({len(v)} runs: not counted)')
                           for k, v in reps.items()) or '–'
        widest = f'{noise["range"]:.2f} ({noise["recipe"]})' if noise['recipe'] else '–'
        rows.append([b.label, b.images_label(ctx), detail, widest, f'{noise["sampling"]:.2f} at {noise["top1"]:.1f} %'])
    return md_table(['budget', 'images scored',
                     f'repeated runs of one recipe (top-1 %; ranges of ≥ {MIN_SEEDS} runs)', 'largest range (points)',
                     'sampling term 2·√(2p(1−p)/n) (points, at p)'], rows)


def table_comparisons(ctx: Context, ids: Optional[Sequence[str]] = None) -> str:
    rows = []
    for cid in ids or [k for k in COMPARISON if k not in HELDOUT_CHECKS]:
        c = run_comparison(ctx, cid)
        what, budget = COMPARISON[cid][1], COMPARISON[cid][2]
        if c is None:
            rows.append([what, BUDGETS[budget].label.split(' (')[0], 'not yet run', '', '', '', '', '', '',
                         'not yet measured'])
            continue
        rows.append([what, BUDGETS[budget].label.split(' (')[0], fmt_arm(c['a']), fmt_arm(c['b']), f'{c["delta"]:+.2f}',
                     f'{c["floor"]:.2f}', c['floor_from'], f'{c["margin"]:+.2f}', fmt_t(c['t']), verdict_text(c)])
    return md_table(['comparison (A vs B)', 'budget', 'A top-1 (%)', 'B top-1 (%)', 'Δ = A − B', 'N', 'N from',
                     'margin \\|Δ\\| − N', 'Welch t', 'verdict'], rows)


def table_claims(ctx: Context) -> str:
    rows = []
    for claim, paper, cid, sign, _ in CLAIMS:
        c = run_comparison(ctx, cid)
        cmd = COMPARISON[cid][-1]
        seeds = '–' if c is None else ' / '.join(str(n) for n in c['seeds'])
        delta = '–' if c is None else f'{c["delta"]:+.2f} ({fmt_noise(c)})'
        rows.append([claim, paper, f'**{claim_verdict_of(ctx, cid)}**', COMPARISON[cid][1],
                     protocol_difference(cid) or "the paper's", seeds, delta, f'`{cmd}`'])
    return md_table(['claim', 'paper', 'verdict', 'our comparison (A vs B)', "protocol: ours vs the paper's",
                     'seeds A / B', 'Δ (N, margin \\|Δ\\| − N, Welch t)', 'command'], rows)


# -- accuracy vs params
ACC_LABELS = {
    'vit_odevit_tiny_cifar_params_matched': 'discrete timm ViT, 4 blocks D 128: **ODE-ViT\'s params**',
    'vit_odevit_tiny_cifar_flops_matched': 'discrete timm ViT, 6 blocks D 256: **ODE-ViT\'s FLOPs** at 6 Euler steps',
    'vit_tiny_cifar_params_matched': 'discrete timm ViT, 4 blocks D 96: **bViT\'s params** (not ODE-ViT\'s)',
    'bvit_tiny_cifar': 'one timm block D 192, 12 recurrent iterations',
    'odevit_tiny_cifar': 'ODE-ViT D 256, 6 Euler steps, CenterNorm field, no final norm (the paper\'s), timm\'s classifier init',
    'odevit_tiny_cifar_spectral_head': 'the same with the reference\'s spectral-norm head (`head_init=\'spectral\'`) ‡',
    'odevit_tiny_cifar_layernorm': 'spectral head ‡, LayerNorm field (`field_norm=\'layer\'`)',
    'vit_tiny_cifar_flops_matched': 'discrete timm ViT, 12 blocks D 192: **bViT\'s FLOPs**',
}


def table_accuracy_vs_params(ctx: Context) -> str:
    runs = ctx.json('accuracy_vs_params')['runs']
    order = [k for k in ACC_LABELS if k in {base_name(n) for n in runs}] + sorted(
        {base_name(n) for n in runs} - set(ACC_LABELS))
    rows = []
    for name in order:
        first = next(r for k, r in runs.items() if base_name(k) == name)
        val, test = acc_val(ctx, name), acc(ctx, name)
        rows.append([f'`{name}`', ACC_LABELS.get(name, first.get('role', '')), f'{first["params_M"]:.3f}', len(test),
                     ' / '.join(f'{v:.2f}' for v in val), ' / '.join(f'{v:.2f}' for v in test), fmt_arm(test)])
    return md_table(['model', 'what', 'params (M)', 'seeds', 'val top-1 per seed', 'test top-1 per seed',
                     'test top-1 mean ± std'], rows)


def table_inference_grid(ctx: Context) -> str:
    runs = ctx.json('accuracy_vs_params')['runs']
    swept = [(k, r) for k, r in runs.items() if r.get('inference_grid_sweep')]
    cols = [(g['method'], g['steps'], g['block_evals']) for g in swept[0][1]['inference_grid_sweep']['test_top1']]
    header = ['run (trained: euler 6)', 'seed'] + [f'{m} {s} ({e} evals)' for m, s, e in cols]
    rows = []
    for k, r in swept:
        vals = {(g['method'], g['steps']): g['top1'] for g in r['inference_grid_sweep']['test_top1']}
        rows.append([f'`{base_name(k)}`', seed_of(k, r)] + [f'{vals[(m, s)]:.2f}' if (m, s) in vals else '–' for m, s, _ in cols])
    return md_table(header, rows)


def table_parity(ctx: Context) -> str:
    rows = []
    for r in ctx.json('odevit_parity')['rows']:
        impl = f"ours ({r['head_init']} head)" if r['implementation'] == 'ours' else r['implementation']
        rows.append([impl, r['seed'], 'yes' if r['final_norm'] else 'no', f'{r["params_M"]:.4f}',
                     f'{r["test_top1"]:.2f}', f'{r["state_rms"][0]:.2f} → {r["state_rms"][-1]:.2f}'])
    return md_table(['implementation', 'seed', 'final norm', 'params (M)', 'test top-1 (%)', 'state RMS t = 0 → 1'], rows)


def table_stability(ctx: Context) -> str:
    rows = []
    for r in ctx.json('odevit_stability')['rows']:
        fin = r.get('final')
        rows.append([r['variant'].split('@')[0], seed_of(r['variant'], r), f'{r["test_top1"]:.2f}',
                     f'{fin["state_rms"][0]:.2f} → {fin["state_rms"][-1]:.2f}' if fin else '—',
                     f'{fin["attn_entropy"][0]:.2f} → {fin["attn_entropy"][-1]:.2f}' if fin else '—',
                     '† old token init' if 'note' in r else ''])
    return md_table(['variant', 'seed', 'test top-1 (%)', 'state RMS t_0 → t_end', 'attention entropy t_0 → t_end (nats)', 'note'], rows)


def table_ablation(ctx: Context) -> str:
    def score(r, split):
        return f'{r[split]:.2f}' if split in r else ('diverged' if 'diverged' in r else '—')
    return md_table(['variant', 'model', 'kwargs', 'lr', 'held-out top-1 (%)', 'test top-1 (%)'],
                    [[r['variant'], f'`{r["model"]}`', f'`{json.dumps(r["kwargs"])}`', r['lr'], score(r, 'holdout_top1'),
                      score(r, 'test_top1')] for r in ctx.json('odevit_ablation')['rows']])


def table_head_init(ctx: Context) -> str:
    labels = {'ours': "`odevit_tiny_cifar` (classifier trunc-normal 0.02, timm's ViT)",
              'ours_spectral_head': "`odevit_tiny_cifar`, `head_init='spectral'` (the reference's init)",
              'ours_sqrtdepth': "`odevit_tiny_cifar`, depth scale carried by the weights (`sqrtdepth`: same function)",
              'reference': "the authors' `ViTNeuralODE` (their code, their init)"}
    arms = _rows_by('head_init_accuracy', lambda r: r['variant'])(ctx)
    return md_table(['model', 'test top-1 per seed (%)', 'mean ± std'],
                    [[labels.get(k, k), ', '.join(f'{x:.1f}' for x in v), fmt_arm(v)] for k, v in arms.items()])


def _grid_row_stats(means: Dict[int, float]) -> List[str]:
    """Spread of the mean top-1 over Euler 4–24 and the loss at 3 steps against the best grid (issue 29's targets)."""
    band = [v for g, v in means.items() if 4 <= g <= 24]
    return [f'{spread(band):.1f}' if band else '–', f'{means[3] - max(means.values()):+.1f}' if 3 in means else '–']


def table_step_robustness(ctx: Context) -> str:
    d = optional_json(ctx, 'step_robustness')
    if d is None:
        return '*Not run yet*: `cd bench && python step_robustness.py --train-steps 6 12 24 --seeds 0 1 2`.'
    grids = d['grids']
    rows = []
    for trained in sorted({r['train_steps'] for r in d['rows']}):
        means = {g: mean(v) for g in grids for v in [step_robust(ctx, trained, g)] if v}
        runs = [r for r in d['rows'] if r['train_steps'] == trained]
        rows.append([f'Euler {trained}', len(runs)] + [f'{means[g]:.1f}' if g in means else '–' for g in grids]
                    + _grid_row_stats(means) + [f'{mean([r["train_s"] for r in runs]) / 60:.1f}'])
    return md_table(['trained at', 'seeds'] + [f'{g}' for g in grids]
                    + ['spread 4–24', '3 steps − best', 'train min/run'], rows)


def anytime_arm_label(arm: str) -> str:
    """'random' -> its description; 'random_w4' (a width other than the study's default) -> 'S − 4 … S + 4'."""
    base, _, width = arm.partition('_w')
    label = ANYTIME_ARMS.get(base, base)
    return label.replace('S − w', f'S − {width}').replace('S + w', f'S + {width}') if width else label


def _anytime_budget(ctx: Context, model: str) -> str:
    study = anytime_study(ctx, model)
    if study is None:
        return 'not run yet'
    return study['budget'] + f'; width w = {study["default_width"]} unless the row names another'


def table_anytime_training(ctx: Context, model: str) -> str:
    study = anytime_study(ctx, model)
    if study is None:
        return f'*Not run yet*: `cd bench && python anytime_training.py --model {model} --seeds 0 1 2`.'
    grids, rows = study['grids'], []
    for arm in dict.fromkeys(r['arm'] for r in study['rows']):
        runs = [r for r in study['rows'] if r['arm'] == arm]
        means = {g: mean(v) for g in grids for v in [anytime_arm(ctx, model, arm, g)] if v}
        rows.append([anytime_arm_label(arm), len(runs), f'{mean([r["train_nfe_mean"] for r in runs]):.2f}',
                     f'{mean([r["train_s"] for r in runs]) / 60:.1f}'] + [f'{means[g]:.1f}' if g in means else '–' for g in grids]
                    + _grid_row_stats(means))
    return md_table(['training', 'seeds', 'train NFE/image', 'train min/run'] + [f'{g}' for g in grids]
                    + ['spread 4–24', '3 steps − best'], rows)


def refusals(ctx: Context, r: dict) -> List[dict]:
    """The refused cycles of release ``r`` (``release/<tag>.refused.json``, written by tools.cycle), each checked to
    have started from the weights of the cycle it names (``started_from_sha256``): a log of another record is an
    error, not rows under the wrong cycle."""
    path = ctx.release / f'{r["tag"]}.refused.json'
    if not path.exists():
        return []
    cycles = (r['cycles'] or {}).get('cycles', [])
    weights = {c['cycle']: n.get('started_from_sha256') for c, n in zip(cycles, cycles[1:])}
    if cycles:
        weights[cycles[-1]['cycle']] = r['cycles']['weights_sha256']
    out = json.loads(path.read_text())
    for d in out:
        if d.get('release') != r['tag'] or not d.get('started_from_sha256') or \
                weights.get(d.get('from_cycle')) != d['started_from_sha256']:
            raise ValueError(f"{path}: the refusal of {d.get('recorded', {}).get('date')} started from weights "
                             f"{str(d.get('started_from_sha256'))[:12]} of {d.get('release')} cycle {d.get('from_cycle')}, "
                             f"which {r['tag']}'s record.json does not hold")
    return out


def table_release_depths(ctx: Context) -> str:
    """Top-1 of each release at each depth, per cycle that measured it: the test split at release
    (``test_top1_at_depth``) and, for a cycle decided on the anytime criterion, the held-out split before / after;
    then the refused anytime cycles of ``release/<tag>.refused.json`` (tools.cycle), held-out only."""
    rows, grids = [], set()
    for r in releases(ctx):
        refused = refusals(ctx, r)
        for c in (r['cycles'] or {}).get('cycles', []):
            criterion = c.get('criterion') or {}
            measured = [(f'held-out, release before cycle {c["cycle"]}', criterion.get('val_top1_at_depth_before'),
                         criterion.get('images')),
                        (f'held-out, cycle {c["cycle"]}', criterion.get('val_top1_at_depth'), criterion.get('images')),
                        (f'test, cycle {c["cycle"]} (released)', c.get('test_top1_at_depth'),
                         c.get('test_images') or r['cycles']['test']['images'])]
            has_held_out_row = bool(criterion.get('val_top1_at_depth'))
            for d in (d for d in refused if d['from_cycle'] == c['cycle'] and d.get('criterion')):
                when, crit = d['recorded']['date'][:10], d['criterion']
                if not has_held_out_row:  # the cycle it started from has none of its own: the first refusal's, once
                    has_held_out_row = True
                    measured.append((f'held-out, cycle {c["cycle"]} before the cycle refused {when}',
                                     crit['val_top1_at_depth_before'], crit['images']))
                drawn = _steps_drawn(d['command'], f'the cycle refused {when}')
                epochs = f'{d["epochs"]} epoch' + ('s' if d['epochs'] != 1 else '')
                measured.append((f'held-out, a cycle after {c["cycle"]}, refused ({when}; {epochs} at {drawn} steps; '
                                 f'mean {crit["mean_gain"]:+.2f}, needed > '
                                 f'{crit["required_mean_gain"]:.2f})', crit['val_top1_at_depth'], crit['images']))
            for label, depths, images in measured:
                if depths:
                    means = {int(k): v for k, v in depths.items()}
                    grids |= set(means)
                    rows.append((r['tag'], label, images, means))
    if not rows:
        return '*No release has measured its depths yet* (`python -m tools.cycle release` measures them from now on).'
    grids = sorted(grids)
    return md_table(['release', 'weights, split', 'images'] + [str(g) for g in grids] +
                    ['spread 4–24', '3 steps − best', '95 % interval (widest cell)'],
                    [[f'`{tag}`', label, f'{images:,}' if images else '–'] +
                     [f'{means[g]:.1f}' if g in means else '–' for g in grids] + _grid_row_stats(means) +
                     [f'± {max(_half_width(v, images) for v in means.values()):.2f}' if images else '–']
                     for tag, label, images, means in rows])


def table_anytime_inference(ctx: Context) -> str:
    d = ctx.json('anytime_inference')
    rows = [[f'fixed {g["grid"]}', f'{g["nfe"]:.2f}', f'{g["top1"]:.1f}', f'{g["ms_per_image"]:.2f}', '']
            for g in d['fixed_grids']]
    rows += [[f'early exit on Euler {e["grid_steps"]}, {e["rule"]}'.replace('|', '\\|'), f'{e["nfe"]:.2f}', f'{e["top1"]:.1f}',
              f'{e["ms_per_image"]:.2f}', f'{e["best_fixed_grid_within_nfe"]["grid"]}: '
              f'{e["best_fixed_grid_within_nfe"]["top1"]:.1f}' if e.get('best_fixed_grid_within_nfe') else '–']
             for e in d['early_exit']]
    return md_table(['setting', 'mean NFE/image', 'top-1 (%)', 'ms/image',
                     'best fixed grid within its NFE (picked on these test images)'], rows)


def _early_exit_summary(ctx: Context) -> str:
    """Each early-exit setting against the fixed grid that scored best on the same test images among those costing no
    more NFE (a choice made on test, said so): one run each, so preliminary (no verdict, no floor)."""
    d = ctx.json('anytime_inference')
    gaps = [e['top1'] - e['best_fixed_grid_within_nfe']['top1'] for e in d['early_exit']
            if e.get('best_fixed_grid_within_nfe')]
    return (f'Against the fixed grid that scored best on these {d["images"]:,} test images among those costing no more '
            f'field evaluations (so the fixed side is picked on test), the {len(gaps)} early-exit settings differ by '
            f'{min(gaps):+.1f} … {max(gaps):+.1f} points of top-1: single runs, preliminary')


def _anytime_random_verdict(ctx: Context) -> str:
    """The random-depth arm against fixed-grid training at S, 3 and 24 steps, from those comparisons' verdicts."""
    at = {'S': 'anytime_random_at_S', '3': 'anytime_random_at_3', '24': 'anytime_random_at_24'}
    cs = {k: run_comparison(ctx, cid) for k, cid in at.items()}
    if any(c is None or c['preliminary'] for c in cs.values()):
        return 'its differences from fixed-grid training are preliminary (fewer than 3 seeds an arm)'
    seeds = min(min(c['seeds']) for c in cs.values())
    beyond = [f'at {k} ({c["delta"]:+.2f}, floor {c["floor"]:.2f})' for k, c in cs.items() if c['finding']]
    if not beyond:
        return (f'none of its differences from fixed-grid training (at S, 3 and 24 steps) exceeds the floor ({seeds} '
                'seeds; the rows above), so the study does not show that it makes the grid a dial')
    return f'its differences from fixed-grid training exceed the floor {"; ".join(beyond)} ({seeds} seeds; the rows above)'


def _grid_best_own(ctx: Context) -> str:
    """In how many seeds `odevit_tiny_cifar`'s inference-grid sweep scored best at the grid it was trained on."""
    runs = [r for k, r in ctx.json('accuracy_vs_params')['runs'].items()
            if base_name(k) == 'odevit_tiny_cifar' and r.get('inference_grid_sweep')]
    margins = []  # the trained grid's top-1 minus the best other grid's, per seed
    for r in runs:
        cells = r['inference_grid_sweep']['test_top1']
        own = next(g for g in cells if g['method'] == 'euler' and g['steps'] == r['kwargs']['steps'])
        margins.append(own['top1'] - max((g['top1'] for g in cells if g is not own), default=own['top1']))
    if not margins:
        return 'none of its seeds (no sweep run)'
    return (f'{sum(m >= 0 for m in margins)} of its {len(runs)} seeds, by {min(margins):+.2f} to {max(margins):+.2f} '
            f'points over the next-best grid (one margin per seed, each from one run: preliminary)')


def _memory_repeat(ctx: Context) -> str:
    """The direct-backprop cells of memory_vs_steps beside grad_checkpointing_memory's runs of the same model and batch
    without checkpointing (two single measurements of one setting)."""
    mem = ctx.json('memory_vs_steps')
    other = ctx.json('grad_checkpointing_memory')
    if other.get('batch') != mem['batch']:
        return 'no second measurement of the same batch is on file'
    again = {r['steps']: r['without_mib'] for r in other['rows'] if r['family'] == mem['model']}
    pairs = [(r['steps'], r['direct'], again[r['steps']]) for r in mem['rows'] if r['steps'] in again]
    return (f"at {' / '.join(str(n) for n, _, _ in pairs)} Euler steps: {' / '.join(f'{a:.0f}' for _, a, _ in pairs)} MiB "
            f"in the table, {' / '.join(f'{b:.0f}' for _, _, b in pairs)} MiB there")


def _anytime_inference_weights(ctx: Context) -> str:
    """Which weights anytime_inference.json measured, against the release folder's record."""
    d = ctx.json('anytime_inference')
    tag = d['model'].split('/')[-1].removeprefix('local-dir:')
    record = RELEASE / tag / 'record.json'
    current = json.loads(record.read_text())['weights_sha256'] if record.is_file() else None
    sha = d.get('weights_sha256')
    if sha is None:
        return (f'not recorded (the run predates the sha256 field or read the Hub): possibly an earlier `{tag}`; '
                're-run to measure the current one')
    if sha == current:
        return f'the current `{tag}` (sha256 {sha[:12]}…)'
    return f'an earlier `{tag}` (sha256 {sha[:12]}…, the release is now {str(current)[:12]}…): re-run to measure it'


def table_sgd_divergence(ctx: Context) -> str:
    rows = []
    for r in ctx.json('sgd_divergence')['runs']:
        sharp = r.get('sharpness_at_init') or {}
        blame = r.get('blame')
        culprit = next(iter(blame['rms_t1_with_one_parameter_restored'])) if blame else None
        model = "the authors' `ViTNeuralODE`" if r['model'] == 'reference' else f'`{r["model"]}`'
        rows.append([model, r['variant'], r['batch'], f'{r["lr"]:g}', r.get('clip_grad') or 'off',
                     sharp.get('all', '–'), sharp.get('depth (field / blocks)', '–'), sharp.get('head', '–'),
                     f'{r["sgd_stable_below"]:.0f}',
                     r['diverged_at_update'] or f'no NaN in {len(r["log"]) - 1}',
                     f'{blame["update"]}: `{culprit}`' if blame else '–'])
    return md_table(['model', 'variant', 'batch', 'lr', 'clipping', 'λ_max at init: all weights', 'λ_max: the field', 'λ_max: head',
                     'limit: Nesterov SGD stable below (1.36 / lr)', 'NaN at update', 'state × 10 in one update at: the one weight whose '
                     'update, undone, shrinks it most'], rows)


def table_recipes_no_nan(ctx: Context) -> str:
    rows = []
    for r in ctx.json('recipes_no_nan')['rows']:
        loss = (f'{r["loss_first"]:.3g} → {r["loss_last"]:.3g}' if r['loss_first'] is not None else '–')
        top1 = f'{r["eval_top1"]:.2f} ({r["val_images"]})' if r.get('eval_top1') is not None else '–'
        rows.append([r['name'], r['batch'], f'{r["updates_logged"]} / {r["updates_planned"]}', loss,
                     'yes' if r['nan_or_inf'] or r['returncode'] else 'no', top1,
                     (r['error'] or '')[:90].replace('|', '/'), r['seconds']])
    return md_table(['run', 'batch', 'updates logged / planned', 'loss first → last', 'stopped / NaN', 'val top-1 % (images)',
                     'error', 'seconds'], rows)


DSMALL_LABELS = {
    'teacher_discrete_vit': 'teacher: `vit_tiny_cifar_params_matched` (bViT\'s params), 6 epochs',
    'odevit_scratch': '`odevit_tiny_cifar` (4 Euler steps) from scratch, CE',
    'odevit_distilled': 'the same, trajectory-distilled from the teacher',
    'odeified_at_conversion': 'teacher odeified (one shared block, init `mean`), no training',
    'odeified_ce_finetune': 'odeified, CE fine-tune',
    'odeified_self_distilled': 'odeified, distilled from its own discrete original',
}


def table_distillation_small(ctx: Context) -> str:
    arms = _distill_small_arms(ctx)
    return md_table(['run', 'top-1 per seed (%)', 'mean ± std'],
                    [[DSMALL_LABELS.get(k, k), ' / '.join(f'{v[s]:.2f}' for s in sorted(v)), fmt_arm(list(v.values()))]
                     for k, v in arms.items()])


def _distill_times(ctx: Context) -> Dict[str, Dict[str, List[float]]]:
    """distillation_study: train.py's seconds per run, by arm and by where it ran (the machine, and how many trainings
    ran at once): times compare only within one such condition."""
    out: Dict[str, Dict[str, List[float]]] = {}
    for r in (optional_json(ctx, 'distillation_study') or {}).get('runs', {}).values():
        where = f"{r['environment']['machine']}, {r.get('concurrent_runs', '?')} at a time"
        out.setdefault(r['arm'], {}).setdefault(where, []).append(r['train_s'])
    return out


def table_distillation_study(ctx: Context) -> str:
    times, rows = _distill_times(ctx), []
    for arm, what in DISTILL_ARMS.items():
        ho, test = distill(ctx, arm, 'held_out'), distill(ctx, arm)
        cost = '; '.join(f'{statistics.median(v):,.0f} s on {w}' for w, v in sorted(times.get(arm, {}).items()))
        rows.append([f'`{arm}`', what, len(test), fmt_arm(ho) if ho else '–', fmt_arm(test) if test else '–', cost or '–'])
    return md_table(['arm', "the teacher's part", 'runs', 'held-out top-1 (%), the selection', 'test top-1 (%)',
                     'train.py wall time per run (median)'], rows)


def table_plug_and_play(ctx: Context) -> str:
    runs = list((optional_json(ctx, 'plug_and_play') or {}).get('runs', {}).values())
    rows = []
    for arm, what in PNP_ARMS.items():
        mine = [r for r in runs if r['arm'] == arm]
        ho, test = pnp(ctx, arm, 'held_out'), pnp(ctx, arm)
        params = _one({r['trainable_params'] for r in mine}) if mine else None
        times: Dict[str, List[float]] = {}
        for r in mine:
            times.setdefault(r['environment']['machine'], []).append(r['train_s'])
        cost = '; '.join(f'{statistics.median(v):,.0f} s on {w}' for w, v in sorted(times.items()))
        rows.append([
            f'`{arm}`',
            what,
            f'{params:,}' if params else '–',
            len(test),
            fmt_arm(ho) if ho else '–',
            fmt_arm(test) if test else '–',
            cost or '–',
        ])
    header = [
        'arm',
        'student and loss',
        "student's trainable params",
        'runs',
        'held-out top-1 (%), the selection',
        'test top-1 (%)',
        'train.py time per run (median)',
    ]
    return md_table(header, rows)


PNP_TAG = 'odevit_tiny_convstem_cifar.c10_pnp'  # the plug & play student's release


def _pnp_release(ctx: Context) -> str:
    """Issue 60's rule: release the plug & play student when it beats the free ODE-ViT beyond the held-out floor."""
    c = run_comparison(ctx, 'pnp_heldout_plug_and_play_vs_free')
    if c is None or c['preliminary']:
        have = ' / '.join(str(len(pnp(ctx, arm, 'held_out'))) for arm in ('plug_and_play', 'free'))
        return f'not yet decided: `plug_and_play` / `free` have {have} of the {MIN_SEEDS} runs each that it needs'
    if c['finding'] and c['delta'] > 0:
        won = (f'`plug_and_play` beats `free` on held-out images by {c["delta"]:+.2f}, beyond the floor '
               f'({c["floor"]:.2f})')
        tags = {r['tag']: r for r in releases(ctx)}
        if PNP_TAG not in tags:
            return f'{won}: it is to be released'
        record, free = tags[PNP_TAG]['cycles'], tags['odevit_tiny_cifar.c10']['cycles']['test']['top1']
        top1, epochs = record['test']['top1'], sum(c['epochs'] for c in record['cycles'])
        images = record['test']['images']
        sampling = binomial_floor((top1 + free) / 2, images)
        beyond = abs(top1 - free) > sampling
        gap = (f'; {top1 - free:+.2f} on the same {images:,} test images, {"beyond" if beyond else "within"} the '
               f'{sampling:.2f} that sampling them gives a difference of two single runs; one run each, so the '
               'releases\' seed-to-seed spread is not in it')
        configs = dict.fromkeys(command_args(c['command']).config for c in record['cycles'])
        if None in configs:
            raise ValueError(f'a cycle of {PNP_TAG} names no --config in its command')
        return (f'{won}: released as `{PNP_TAG}` (warm-restart cycles from the study\'s run: '
                + ', then '.join(f'`{config}`' for config in configs)
                + f'): test top-1 {top1:.2f} after {len(record["cycles"])} cycle(s), {epochs} epochs beyond the '
                'study run\'s, '
                + ('level with' if not beyond else 'above' if top1 > free else 'not yet above (its cycles go on)')
                + f' the free release `odevit_tiny_cifar.c10` ({free:.2f}{gap})')
    return (f'`plug_and_play` does not beat `free` beyond the held-out floor (Δ = {c["delta"]:+.2f}, N = '
            f'{c["floor"]:.2f}): no release')


def teacher_cycles(ctx: Context, folder: str) -> List[dict]:
    """The training runs behind a teacher folder's weights, first to last, following each run's ``initial_checkpoint``
    (args.yaml) back to the run that started from scratch: folder, epochs, seconds and machine (train_time.json).
    Runs its weights do not descend from (refused cycles) are not in it."""
    import yaml
    chain, name = [], pathlib.PurePosixPath(folder).name
    while name:
        here = ctx.release / name
        if any(t['folder'] == name for t in chain):
            raise ValueError(f'{folder}: its runs start from each other in a loop at {name}')
        if not (here / 'args.yaml').is_file() or not (here / 'train_time.json').is_file():
            raise ValueError(f'{folder}: {here} holds no args.yaml and train_time.json, so the training behind its '
                             'weights is not on record')
        args = yaml.safe_load((here / 'args.yaml').read_text())
        timed = json.loads((here / 'train_time.json').read_text())
        chain.insert(0, dict(folder=name, epochs=args['epochs'], seconds=timed['seconds'], hardware=timed['hardware']))
        start = args.get('initial_checkpoint') or ''
        name = pathlib.PurePosixPath(start).parent.name if start else ''
    return chain


def _distils_from(command: str, teacher: str) -> bool:
    """Whether a train.py command line names ``teacher`` as its distillation teacher, itself or in its --config."""
    import yaml
    config = command_args(command).config
    kd = yaml.safe_load((ROOT / config).read_text()).get('kd_model_name') if config else None
    return f'local-dir:{teacher}' in command or kd == f'local-dir:{teacher}'


def _pnp_training(ctx: Context) -> str:
    """The plug & play release's training beside the free release's: its own epochs and hours, its teacher's (the
    frozen shell and the distillation targets), and the free release's test top-1 after its first cycle with as many
    epochs or more, and at its end."""
    tags = {r['tag']: r['cycles'] for r in releases(ctx)}
    if PNP_TAG not in tags:
        return ''
    record, free = tags[PNP_TAG], tags['odevit_tiny_cifar.c10']
    prior = record['cycles'][0].get('started_from_run') or {}
    epochs = sum(c['epochs'] for c in record['cycles']) + prior.get('epochs', 0)
    hours = (record['total_seconds'] + (prior.get('seconds') or 0)) / 3600
    own = {c['hardware'] for c in record['cycles']} | ({prior['hardware']} if prior.get('hardware') else set())
    folder = ctx.json('plug_and_play')['teacher']
    teacher = teacher_cycles(ctx, folder)
    free_epochs, done, matched = sum(c['epochs'] for c in free['cycles']), 0, ''
    for c in free['cycles']:
        done += c['epochs']
        if done >= epochs:
            if done < free_epochs:
                matched = (f'{c["test_top1"]:.2f} after its cycle {c["cycle"]} ({done} epochs, its first with {epochs} '
                           'or more) and ')
            break
    else:
        matched = f'(only {free_epochs} epochs, fewer than {epochs}) '
    distilled = [c['cycle'] for c in free['cycles'] if _distils_from(c['command'], folder)]
    same = (f'; cycle{"s" if len(distilled) > 1 else ""} {", ".join(map(str, distilled))} distilled from the same '
            'teacher' if distilled else '')
    return (f'Training so far: `{PNP_TAG}` has had {epochs} epochs of its field ({hours:.1f} h on '
            f'{" / ".join(sorted(own))}) and scores {record["test"]["top1"]:.2f} on the test images; its teacher\'s '
            f'weights, which are its frozen shell and give the targets it is distilled to, took '
            f'{sum(t["epochs"] for t in teacher)} epochs ({sum(t["seconds"] for t in teacher) / 3600:.1f} h on '
            f'{" / ".join(sorted({t["hardware"] for t in teacher}))}: the {len(teacher)} runs from '
            f'`{teacher[0]["folder"]}` to `{teacher[-1]["folder"]}` its weights descend from). The free release '
            f'`odevit_tiny_cifar.c10` scored {matched}{free["test"]["top1"]:.2f} after {free_epochs} epochs '
            f'({free["total_seconds"] / 3600:.1f} h on '
            f'{" / ".join(sorted({c["hardware"] for c in free["cycles"]}))}{same}). The hours are from different '
            'machines and loads: no speed comparison.')


def _distill_choice(ctx: Context) -> str:
    """Issue 44's rule for the release cycles' arm, read on the held-out images: a trajectory arm that beats both
    scratch and logit KD beyond each pair's held-out floor, else the best arm on held-out."""
    ho = {arm: distill(ctx, arm, 'held_out') for arm in DISTILL_ARMS}
    short = [arm for arm, v in ho.items() if len(v) < MIN_SEEDS]
    if short:
        made = f'not yet made: {", ".join(f"`{a}`" for a in short)} {"has" if len(short) == 1 else "have"} fewer ' \
               f'than {MIN_SEEDS} runs'
        if any(not a.startswith('traj_') or not ho[a] for a in short):
            return made
        # a short trajectory arm wins only with a mean above both others' by each pair's floor; a floor is at least
        # the ranges of the pair's runs so far (which more runs can only widen; sampling adds more), so this bar is a
        # lower bound
        bar = {a: max(mean(ho[b]) + max(spread(ho[b]), spread(ho[a])) for b in ('scratch', 'logit_kd')) for a in short}
        need = {a: (bar[a] * MIN_SEEDS - sum(ho[a])) / (MIN_SEEDS - len(ho[a])) for a in short}
        top = max(v for runs in ho.values() for v in runs)
        text = (f'{made}; to win with {MIN_SEEDS} runs, their missing runs would need at least '
                f'{", ".join(f"{need[a]:.1f} % (`{a}`)" for a in short)} held-out top-1 on average, against '
                f'{top:.2f} for the best run so far')
        if any(need[a] <= top + max(spread(ho[a]), spread(ho['scratch']), spread(ho['logit_kd'])) for a in short):
            # within reach of the best run plus the floor: the choice waits for the runs
            return text
        best = max((a for a in ho if a not in short), key=lambda a: mean(ho[a]))
        return f'{text}, so the release cycles go ahead with `{best}`, the best arm on held-out with its runs complete'
    traj = max((a for a in ho if a.startswith('traj_')), key=lambda a: mean(ho[a]))
    beats = [compare(ctx, 'heldout-45k-distill', ho[traj], ho[b]) for b in ('scratch', 'logit_kd')]
    floors = ' and '.join(f'{c["floor"]:.2f}' for c in beats)
    if all(c['finding'] and c['delta'] > 0 for c in beats):
        return f'trajectory distillation wins: `{traj}`, the best trajectory arm on held-out, beats `scratch` and ' \
               f'`logit_kd` beyond their held-out floors ({floors})'
    best = max(ho, key=lambda a: mean(ho[a]))
    return f'trajectory distillation does not win (its best arm, `{traj}`, does not beat both `scratch` and ' \
           f'`logit_kd` beyond their held-out floors, {floors}); the best arm on held-out is `{best}`'


def table_bvit_field_solver(ctx: Context) -> str:
    return md_table(['seed', 'field', 'solver', 'steps', 'block evals', 'test top-1, trained grid', 'euler 24', 'rk4 12'],
                    [[r.get('seed', 0), r['field'], r['method'], r['steps'], r['block_evals'], f'{r["test_top1"]:.2f}',
                      f'{r["test_top1_euler24"]:.2f}', f'{r["test_top1_rk412"]:.2f}']
                     for r in ctx.json('bvit_field_and_solver')['rows']])


def table_deep_supervision(ctx: Context) -> str:
    d = ctx.json('deep_supervision_horizon')
    t = d['trained_iterations']
    points = [1, t // 4, t // 2, 3 * t // 4, t, 3 * t // 2, 2 * t, 3 * t, 4 * t]
    return md_table(['run', 'seed'] + [f'{p} it.' for p in points],
                    [[base_name(k), seed_of(k, r)] + [f'{_at_iteration(r, p):.2f}' for p in points]
                     for k, r in d['runs'].items()])


def table_recipe_study(ctx: Context) -> str:
    rows = ctx.json('recipe_study')['rows']
    return md_table(['model', 'candidate', 'extra train.py args', 'best val top-1 (%)', 'val top-1 per epoch'],
                    [[f'`{r["model"]}`', r['candidate'], f'`{r["extra_args"]}`' if r['extra_args'] else '–',
                      f'{r["best_val_top1"]:.2f}', ' → '.join(f'{v:.1f}' for v in r['val_top1_per_epoch'])] for r in rows])


def table_throughput(ctx: Context) -> str:
    return md_table(['model', 'solver', 'mode', 'block evals', 'inference ODE / discrete', 'train step ODE / discrete',
                     'ODE train step (img/s)'],
                    [[r['model'], r['solver'], r['mode'], r['block_evals'], f'{r["inference"]["ratio"]:.3f}',
                      f'{r["train_step"]["ratio"]:.3f}', f'{r["train_step"]["ode_img_per_s"]:.0f}']
                     for r in ctx.json('throughput')['rows']])


def table_solver_overhead(ctx: Context) -> str:
    d = ctx.json('solver_overhead')
    res = d['results']
    return md_table(['', 'plain loop', '`model.blocks` (end point only)', 'torchdiffeq asked for the whole grid'],
                    [[mode, f'{res[mode]["loop"]["ratio_vs_loop"]:.3f}', f'{res[mode]["odeblock"]["ratio_vs_loop"]:.3f}',
                      f'{res[mode]["full_grid"]["ratio_vs_loop"]:.3f}'] for mode in ('inference', 'train_step')])


SPEED_SETTINGS = ('fp32', 'bf16', 'channels_last', 'bf16+channels_last')  # tools/speed.py's SETTINGS


def _speed_checks(ctx: Context) -> List[Tuple[str, dict, dict]]:
    """(release tag, cycle, its ``tools.speed`` measurement) of every release cycle that measured its setting."""
    return [(r['tag'], c, c['speed']['measured']) for r in releases(ctx) for c in r['cycles']['cycles']
            if (c.get('speed') or {}).get('measured')]


def _bf16_over_fp32(ctx: Context) -> str:
    """bf16's time per update over fp32's in the release cycles' speed checks, without and with AVX512-BF16."""
    def span(bf16: bool) -> str:
        checks = [m['results'] for _, _, m in _speed_checks(ctx) if ('avx512_bf16' in m['cpu_features']) == bf16]
        r = [res['bf16']['seconds'] / res['fp32']['seconds'] for res in checks]
        dropped = sum(bool(res['bf16'].get('dropped')) for res in checks)
        return (f'{min(r):.2f}–{max(r):.2f}× fp32\'s time per update ({len(r)} checks' +
                (f'; in {dropped}, bf16 was timed on one update and dropped as slower)' if dropped else ')')
                if r else 'not measured')
    return f'{span(False)} on the CPUs without AVX512-BF16, {span(True)} on those with it'


def table_release_speed(ctx: Context) -> str:
    """The speed checks of the release cycles (``tools.speed``, interleaved updates; each record's ``speed``): seconds
    per update of each setting on the machine of that cycle, and the setting it chose."""
    def cell(res: Optional[dict]) -> str:
        if res is None:
            return '–'
        dropped = res.get('dropped', '').replace(' per update', '')  # the ratio on its first timed update
        paired = ", paired with fp32's" if 'times' in res else ''  # per-update times kept: the pairing is on record
        return f'{res["seconds"]:.3f}' + (f" (dropped: {dropped} on its one timed update{paired})"
                                          if dropped else '')
    out = [[f'`{tag}`', c['cycle'], f'{m["hardware"]} ({", ".join(m["cpu_features"])})', m['updates'],
            *(cell(m['results'].get(k)) for k in SPEED_SETTINGS), c['speed']['setting']]
           for tag, c, m in _speed_checks(ctx)]
    return md_table(['release', 'cycle', 'machine (CPU features)', 'updates (the first untimed)'] +
                    [f'{k} (s / update)' for k in SPEED_SETTINGS] + ['chosen'], out)


def _speed_untimed(ctx: Context) -> str:
    """The speed checks that kept no per-update times: decided by the rule of their day, not checkable against today's."""
    untimed = {}
    for tag, c, m in _speed_checks(ctx):
        if not any('times' in res for res in m['results'].values()):
            untimed.setdefault(tag, []).append(str(c['cycle']))
    if not untimed:
        return 'every check kept its per-update times'
    which = ' and '.join(f'`{tag}` cycle{"s" if len(cs) > 1 else ""} {", ".join(cs)}' for tag, cs in untimed.items())
    return (f'the checks of {which} kept no per-update times (medians only): they chose under the rule of their day; '
            "their losses and medians can be read against today's rule, their pairwise wins cannot")


def _speed_rule(ctx: Context) -> str:
    """tools.speed's rule for choosing a setting: its TOLERANCE, MIN_SPEEDUP and MIN_WINS (read from the source)."""
    import ast
    import fractions
    tree = ast.parse((ROOT / 'tools' / 'speed.py').read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple)
                and [t.id for t in n.targets[0].elts] == ['TOLERANCE', 'MIN_SPEEDUP', 'MIN_WINS'])
    tolerance, min_speedup, min_wins = eval(compile(ast.Expression(node.value), 'speed.py', 'eval'),
                                            {'__builtins__': {}})  # constants only
    wins = fractions.Fraction(min_wins).limit_denominator(10)
    return (f"a loss within {tolerance:.0%} of fp32's, a median update at least {min_speedup:.0%} faster and a faster "
            f'update in {wins} of the pairs').replace('%', ' %')


def table_memory(ctx: Context) -> str:
    return md_table(['Euler steps', 'direct backprop (MiB)', 'grad checkpointing (MiB)', 'adjoint (MiB)'],
                    [[r['steps'], f'{r["direct"]:.0f}', f'{r["grad_checkpointing"]:.0f}', f'{r["adjoint"]:.0f}']
                     for r in ctx.json('memory_vs_steps')['rows']])


def _walk_seconds(o, keys=('train_s', 'wall_s', 'train_seconds')) -> List[float]:
    """Every run's seconds in a result file: the first of ``keys`` a row holds (one time per run, never two)."""
    out = []
    if isinstance(o, dict):
        own = next((o[k] for k in keys if isinstance(o.get(k), (int, float))), None)
        if own is not None:
            out.append(float(own))
        for k, v in o.items():
            if k not in keys:
                out += _walk_seconds(v, keys)
    elif isinstance(o, list):
        for v in o:
            out += _walk_seconds(v, keys)
    return out


def runtime(ctx: Context, script: str) -> str:
    """bench/README's time column: the median time per run that a script's JSON records (one per run:
    :func:`_walk_seconds`), per machine where every row names its own."""
    if optional_json(ctx, script) is None:
        return 'not run yet'
    d = ctx.json(script)
    rows = _result_rows(d)
    if rows:
        by_machine: Dict[str, List[float]] = {}
        # a file from before rows recorded their environment has only its command's, at the top; in a file that has
        # both, a row without one is older than the command at the top
        top = None if any(isinstance(r.get('environment'), dict) for r in rows) else d.get('environment')
        for r in rows:  # a row read from a run's own record names that run's machine (``hardware``)
            machine = (r.get('hardware') or (r.get('environment') or {}).get('machine') or (top or {}).get('machine')
                       or 'a machine not recorded')
            by_machine.setdefault(machine, []).extend(_walk_seconds(r))
    else:
        by_machine = {' / '.join(_machines(ctx, script)): _walk_seconds(d)}
    parts = []
    for machine, secs in sorted(by_machine.items()):
        if secs:
            med = statistics.median(secs)
            per = f'{med / 60:.0f} min' if med >= 90 else f'{med:.0f} s'
            where = f'; on {machine}' if machine else ''
            parts.append(f'{per} per run (median of {len(secs)} runs in the JSON{where})' if len(secs) > 1
                         else f'{per} (one run in the JSON{where})')
    return '; '.join(parts) or 'not recorded in the JSON'


def trained_on(ctx: Context, script: str) -> str:
    """Where a study's rows were measured, from their ``environment`` records (the budget strings say CPU-sized)."""
    machines = _machines(ctx, script)
    if not machines:
        return 'machine not recorded'
    gpu = any('NVIDIA' in m or 'GPU' in m for m in machines)
    rows = _result_rows(ctx.json(script))
    if rows and all('concurrent_runs' in r for r in rows):  # the rows say how many trainings shared the machine
        n = max(r['concurrent_runs'] for r in rows)
        return (f'trained on {" / ".join(machines)}{_which_rows_where(ctx.json(script))}, '
                + ('one run at a time' if n == 1 else f'up to {n} runs at a time: times compare only between runs '
                   'that ran alike'))
    return (f'trained on {" / ".join(machines)}{_which_rows_where(ctx.json(script))}'
            + ('; data and augmentation on the CPU of a GPU machine: the train times are no CPU cost measure'
               if gpu else ''))


def _which_rows_where(d: dict) -> str:
    """For keyed runs measured on more than one machine: which rows ran where, the machine most rows ran on last (arms
    and seeds compared across machines and torch versions are named, not hidden behind a list of machines)."""
    runs = d.get('runs') if isinstance(d.get('runs'), dict) else {}
    seeded = any('@seed' in key for key in runs)  # keys name seed 0 without a suffix: say the seed
    where: Dict[str, List[str]] = {}
    for key, row in runs.items():
        env = row.get('environment') if isinstance(row, dict) else None
        machine = (f"{env['machine']}, torch {env.get('torch', '?')}" if isinstance(env, dict) and env.get('machine')
                   else 'a machine not recorded')
        where.setdefault(machine, []).append(f'`{base_name(key)}` seed {seed_of(key)}' if seeded else f'`{key}`')
    if len(where) < 2:
        return ''
    *fewer, most = sorted(where, key=lambda m: len(where[m]))
    return ' (' + '; '.join(f'{", ".join(where[m])} on {m}' for m in fewer) + f'; the other rows on {most})'


def recorded_commands(ctx: Context, script: str, keep: Callable[[dict], bool] = lambda r: True) -> str:
    """The distinct commands a result file's rows record, as inline code (the file's own ``environment`` only for a file
    without rows, which one command wrote whole): the docs show what ran, not a command typed beside it."""
    d = ctx.json(script)
    rows = [r for r in _result_rows(d) if keep(r)]
    envs = [r.get('environment') for r in rows] if rows else [d.get('environment')]
    commands = list(dict.fromkeys(e['command'] for e in envs if isinstance(e, dict) and e.get('command')))
    unrecorded = len(envs) - sum(isinstance(e, dict) and bool(e.get('command')) for e in envs)
    missing = [f'{unrecorded} row{"s" if unrecorded > 1 else ""}: command not recorded'] if unrecorded else []
    return '; '.join([f'`{c}`' for c in commands] + missing)


def _result_rows(d: dict) -> List[dict]:
    """A result file's rows: those of its ``runs``, ``rows`` and ``results`` (a dict by key or a list), and of the
    studies it holds (``{'studies': {name: payload}}``), as bench/_util.py's ``_rows`` finds them."""
    tables = [d.get(k) for k in ('runs', 'rows', 'results')]
    studies = d.get('studies') if isinstance(d.get('studies'), dict) else {}
    return [r for t in tables if isinstance(t, (dict, list)) for r in (t.values() if isinstance(t, dict) else t)
            if isinstance(r, dict)] + [r for st in studies.values() if isinstance(st, dict) for r in _result_rows(st)]


def _where_measured(ctx: Context) -> str:
    """The machines every result file's rows name: the CPU models, and the studies measured on a GPU."""
    names = sorted(f.stem for f in ctx.results.glob('*.json'))
    per = {n: _machines(ctx, n) for n in names}
    cpus = sorted({m.split(',')[0] for ms in per.values() for m in ms if 'NVIDIA' not in m and 'GPU' not in m})
    gpus = sorted({m for ms in per.values() for m in ms if 'NVIDIA' in m or 'GPU' in m})
    on_gpu = [n for n, ms in per.items() if ms and all(m in gpus for m in ms)]
    partly = [n for n, ms in per.items() if n not in on_gpu and any(m in gpus for m in ms)]
    cores = sorted({c for ms in per.values() for m in ms for c in re.findall(r'(\d+) CPU cores', m)}, key=int)
    text = f'{"- or ".join(cores)}-core CPUs ({" / ".join(cpus)})' if cpus else 'CPUs'
    if on_gpu or partly:
        text += f', except the rows of {len(on_gpu)} studies measured on {" / ".join(gpus)}: ' + \
            ', '.join(f'`{n}`' for n in on_gpu) + ''.join(f', and some rows of `{n}` (each row names its machine)'
                                                          for n in partly)
    unnamed = [n for n, ms in per.items() if not ms]
    if unnamed:
        text += (f'; the rows of {len(unnamed)} older file{"s" if len(unnamed) > 1 else ""} name no machine: '
                 + ', '.join(f'`{n}`' for n in unnamed))
    mixed = [n for n, ms in per.items() if ms and len({'environment' in r for r in _result_rows(ctx.json(n))}) == 2]
    if mixed:  # rows re-measured since rows record their environment, beside older rows that do not
        text += '; some older rows of ' + ', '.join(f'`{n}`' for n in mixed) + ' name no machine'
    return text


def _machines(ctx: Context, script: str) -> List[str]:
    """The machines a result file's environment records name, sorted."""
    return sorted({m for m in _walk_machines(ctx.json(script)) if m})


def _walk_machines(o) -> List[str]:
    """The ``machine`` of every environment record in a result file."""
    if isinstance(o, dict):
        return ([o['environment'].get('machine')] if isinstance(o.get('environment'), dict) else []) + \
            [m for k, v in o.items() if k not in ('environment', 'replaced_runs') for m in _walk_machines(v)]
    return [m for v in o for m in _walk_machines(v)] if isinstance(o, list) else []


def _walk_environments(o) -> List[dict]:
    """Every environment record in a result file."""
    if isinstance(o, dict):
        return ([o['environment']] if isinstance(o.get('environment'), dict) else []) + \
            [e for k, v in o.items() if k != 'environment' for e in _walk_environments(v)]
    return [e for v in o for e in _walk_environments(v)] if isinstance(o, list) else []


def _dirty_without_diff(ctx: Context) -> str:
    """The result files with a row measured on a dirty checkout whose diff was not kept (before issue 62)."""
    names = [f.stem for f in sorted(ctx.results.glob('*.json'))
             if any('+dirty' in str(e.get('commit')) and 'diff_sha256' not in e
                    for e in _walk_environments(ctx.json(f.stem)))]
    if not names:
        return 'no result file on file records a dirty commit without its diff'
    return (f'{len(names)} of the {len(list(ctx.results.glob("*.json")))} result files on file hold rows measured '
            f'before then on a dirty checkout, which record "+dirty" alone (no checkout reproduces that code; they '
            f'are kept as they were measured): ' + ', '.join(f'`{n}`' for n in names))


def _recorded_seconds(d: dict) -> float:
    return sum(_walk_seconds(d))


def _count_runs(d: dict) -> int:
    return len(_walk_seconds(d))


TABLES: Dict[str, Callable[[Context], str]] = {
    'odevit_models': table_odevit_models,
    'bvit_models': table_bvit_models,
    'odeify_params': table_odeify_params,
    'releases': table_releases,
    'noise_floor': table_noise_floor,
    'comparisons': table_comparisons,
    'heldout_checks': lambda ctx: table_comparisons(ctx, HELDOUT_CHECKS),
    'claims': table_claims,
    'accuracy_vs_params': table_accuracy_vs_params,
    'inference_grid': table_inference_grid,
    'parity': table_parity,
    'stability': table_stability,
    'ablation': table_ablation,
    'distillation_small': table_distillation_small,
    'distillation_study': table_distillation_study,
    'plug_and_play': table_plug_and_play,
    'bvit_field_solver': table_bvit_field_solver,
    'deep_supervision': table_deep_supervision,
    'recipe_study': table_recipe_study,
    'head_init': table_head_init,
    'step_robustness': table_step_robustness,
    'anytime_training': table_anytime_training,
    'anytime_inference': table_anytime_inference,
    'release_depths': table_release_depths,
    'sgd_divergence': table_sgd_divergence,
    'recipes_no_nan': table_recipes_no_nan,
    'throughput': table_throughput,
    'solver_overhead': table_solver_overhead,
    'release_speed': table_release_speed,
    'memory': table_memory,
}


# ---- derived values ------------------------------------------------------------------------------------
def _cmp_value(cid: str, field: str) -> Callable[[Context], object]:
    def value(ctx: Context):
        c = run_comparison(ctx, cid)
        if c is None:
            return 'not yet measured (no run in the JSON)'
        return {'delta': c['delta'], 'floor': c['floor'], 'verdict': verdict_text(c), 'a': fmt_arm(c['a']),
                'b': fmt_arm(c['b']), 'abs_delta': abs(c['delta']), 'margin': c['margin'], 't': fmt_t(c['t']),
                'summary': f'{fmt_arm(c["a"])} vs {fmt_arm(c["b"])}: Δ = {c["delta"]:+.2f} ({fmt_noise(c)}), '
                           f'{verdict_text(c)}',
                'result': f'Δ = {c["delta"]:+.2f} ({fmt_noise(c)}), {verdict_text(c)}'}[field]
    return value


def _model_row(name: str, key: str, **kwargs) -> Callable[[Context], object]:
    def value(ctx: Context):
        return next(r[key] for r in ctx.json('model_table')['rows']
                    if r['model'] == name and (r.get('model_kwargs') or {}) == kwargs)
    return value


def _release(tag: str, key: str) -> Callable[[Context], object]:
    return lambda ctx: next(r[key] for r in releases(ctx) if r['tag'] == tag)


def _inspect_value(ctx: Context, key: str):
    d = json.loads((ROOT / 'docs' / 'inspect_cat' / 'summary.json').read_text())
    return d[key]


def _inspect_provenance(ctx: Context) -> str:
    """Which weights docs/inspect_cat/summary.json was computed from, checked against the release."""
    prov = ROOT / 'docs' / 'inspect_cat' / 'provenance.json'
    if not prov.exists():
        return 'Weights not recorded (re-run the command above to refresh the figures)'
    p = json.loads(prov.read_text())
    weights = ROOT / p['weights']
    if not weights.exists() or hashlib.sha256(weights.read_bytes()).hexdigest() != p['sha256']:
        return (f'Computed from earlier weights than today\'s `{p["weights"]}` (sha256 {p["sha256"][:12]}…; '
                'run the command above to refresh)')
    tag = pathlib.Path(p['weights']).parent.name
    r = next(r for r in releases(ctx) if r['tag'] == tag)
    return (f'The released `{tag}` ({r["top1"]:.2f} ± {_half_width(r["top1"], r["cycles"]["test"]["images"]):.2f} % '
            'test top-1, 95 % interval), by the command above')


def _half_width(top1: float, images: int) -> float:
    """Half-width (points) of the 95 % binomial interval of a top-1 of ``top1`` % on ``images`` images."""
    return 1.96 * (top1 * (100 - top1) / images) ** .5


def _claims_summary(ctx: Context) -> str:
    counts: Dict[str, int] = {}
    for cid in CLAIM:
        v = claim_verdict_of(ctx, cid).replace(' (within noise)', '')
        counts[v] = counts.get(v, 0) + 1
    return ', '.join(f'{n} {v}' for v, n in counts.items())


def _bibtex(key: str) -> str:
    """The BibTeX the model cards print (timm_odevit/model_card.py CITATIONS), read without importing it."""
    tree = ast.parse((ROOT / 'timm_odevit' / 'model_card.py').read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == 'CITATIONS' for t in node.targets):
            return ast.literal_eval(node.value)[key]
    raise KeyError('CITATIONS not found in timm_odevit/model_card.py')


def _authors(bibtex: str) -> str:
    """'Last, First and ...' of a BibTeX entry as 'First Last, ...' (the README names the authors the cards cite)."""
    field = re.search(r'author\s*=\s*\{(.*?)\},', bibtex, re.S).group(1)
    names = [' '.join(reversed([p.strip() for p in a.split(',', 1)])) for a in field.split(' and ')]
    return ', '.join(names)


def _sgd(model: str, variant: str, batch: int, field: str) -> Callable[[Context], object]:
    """A field of one sgd_divergence run ('lambda' / 'field': λ_max at init over all weights / the field's, 'nan_at',
    'limit': train.py's Nesterov SGD's 1.36 / lr, 'updates', 'ratio': lambda / limit)."""
    def value(ctx: Context):
        run = next(r for r in ctx.json('sgd_divergence')['runs']
                   if r['model'] == model and r['variant'] == variant and r['batch'] == batch and not r.get('clip_grad'))
        sharp = run.get('sharpness_at_init') or {}
        return {'lambda': sharp.get('all'), 'field': sharp.get('depth (field / blocks)'), 'nan_at': run['diverged_at_update'],
                'limit': run['sgd_stable_below'], 'updates': len(run['log']) - 1,
                'ratio': sharp['all'] / run['sgd_stable_below'] if sharp.get('all') else math.nan,
                'culprit': next(iter((run.get('blame') or {}).get('rms_t1_with_one_parameter_restored', {})), None),
                }[field]
    return value


def _full_epochs(ctx: Context) -> str:
    """The recipes_no_nan rows that are one full epoch (1,406 updates at batch 32), as prose."""
    rows = {r['name'].split()[0]: r for r in ctx.json('recipes_no_nan')['rows']
            if r['updates_planned'] * r['batch'] >= FULL_EPOCH_IMAGES}

    def text(model: str) -> str:
        r = rows.get(model)
        if r is None:
            return f'`{model}` not run yet'
        head = f'`{model}` {r["updates_logged"]} / {r["updates_planned"]} updates'
        if r['returncode']:
            return f'{head}, stopped: {r["error"]}'
        machine = (r.get('environment') or {}).get('machine', 'machine not recorded')
        return (f'{head}, no NaN, loss {r["loss_first"]:.2f} → {r["loss_last"]:.2f}, validation top-1 '
                f'{r["eval_top1"]:.1f} % ({r["val_images"]} test images), {r["seconds"] / 60:.0f} min ({machine})')
    return '; '.join(text(m) for m in ('odevit_tiny_cifar', 'bvit_tiny_cifar', 'vit_odeified'))


FULL_EPOCH_IMAGES = 1406 * 32  # recipes_no_nan: every full batch of the 45k training images (a row this long is an epoch)


def _sgd_peak_lr(ctx: Context) -> str:
    """timm's default SGD at peak lr from the first update (recipes_no_nan's `defaults` rows), as the README says it:
    which models trained a full epoch, which blew up on the short runs and whether `--clip-grad 1` saved them."""
    rows = [r for r in ctx.json('recipes_no_nan')['rows'] if r['name'].split()[-1] in ('defaults', 'defaults_clip1')]
    model, failed = (lambda r: r['name'].split()[0]), (lambda r: bool(r['returncode'] or r['nan_or_inf']))
    blew_up = lambda r: r['nan_or_inf'] or 'FloatingPointError' in (r.get('error') or '')  # noqa: E731 (not any error)
    full = [r for r in rows if r['updates_planned'] * r['batch'] >= FULL_EPOCH_IMAGES]
    ok = [r for r in full if not failed(r)]
    batch = '/'.join(sorted({str(r['batch']) for r in full}))
    epoch = ('no full epoch was run' if not full else f'each of the {len(full)} models trained for a full epoch at batch '
             f'{batch} completed it' if len(ok) == len(full) else f'{", ".join(f"`{model(r)}`" for r in ok) or "none"} of '
             f'the {len(full)} models trained for a full epoch at batch {batch} completed it')
    clipped = {(model(r), r['batch']) for r in rows if r['name'].endswith('_clip1') and not failed(r)}
    blew = [f'`{model(r)}` blew up at batch {r["batch"]}' + (' unless `--clip-grad 1`' if (model(r), r['batch']) in clipped
                                                              else '')
            for r in rows if r not in full and r['name'].endswith(' defaults') and blew_up(r)]
    batches = ' and '.join(str(b) for b in sorted({r['batch'] for r in rows}))
    return f"{epoch}; {'; '.join(blew) or 'none blew up on the short runs'} (single runs, at batch {batches} only)"


# When the speed results were measured. bench/_util.py records date, commit and CPU model in a JSON's environment
# since e5c732d (2026-12-03); the files written before carry none, and the commit that added each (git log, UTC) is
# the latest date it can have been measured. The rewrites of the code those files time, with their commits:
UNDATED_RESULTS = {'throughput': '2026-11-30 02:25', 'solver_overhead': '2026-11-29 19:18',
                   'memory_vs_steps': '2026-12-01 16:00'}
SPEED_REWRITES = [('2026-11-30 12:58', 'eb1d4b8', 'the depth-stack rewrite',
                   '`ContinuousDepthStack` in place of the ODE block'),
                  ('2026-12-04 01:38', 'da6b887', 'the Runge–Kutta stepping rewrite',
                   'our own Butcher tables in `layers/solver.py`, one stepper for all depth')]


def _speed_rewrites(ctx: Context) -> str:
    return ' and '.join(f'{name} ({what}; {commit}, {date} UTC)' for date, commit, name, what in SPEED_REWRITES)


def _provenance(ctx: Context, name: str) -> str:
    """Where and when bench/results/NAME.json was measured, as far as it (or, without a date, git) records it, and
    which of SPEED_REWRITES it predates."""
    env = ctx.json(name)['environment']
    if env.get('date'):
        when = env['date'][:16].replace('T', ' ')
        text = (f"`{name}.json` was measured {when} UTC at commit {env.get('commit', '?')} on "
                f"{env.get('machine', 'an unrecorded CPU')}")
    else:
        when = UNDATED_RESULTS[name]
        text = f'`{name}.json`, committed {when} UTC (the JSON holds no date, commit or CPU model),'
    later = [rewrite for date, _, rewrite, _ in SPEED_REWRITES if date > when]
    if len(later) == len(SPEED_REWRITES) > 1:
        return text + ' predates both rewrites'
    return text + (' predates ' + ' and '.join(later) if later else ', after the rewrites')


def _release_depth_loss(ctx: Context, tag: str) -> float:
    """Points of test top-1 the released weights lose at 3 steps against their best depth (the last cycle that
    measured depths)."""
    rec = next(r for r in releases(ctx) if r['tag'] == tag)['cycles']
    depths = [c['test_top1_at_depth'] for c in rec['cycles'] if c.get('test_top1_at_depth')][-1]
    return max(depths.values()) - depths['3']


def _noise_note(ctx: Context, budget: str) -> str:
    """A budget's largest range of one recipe and its sampling term, in words."""
    noise = budget_noise(ctx, budget)
    return (f'their largest range is {noise["range"]:.2f} points ({noise["recipe"]}), the sampling term '
            f'{noise["sampling"]:.2f} at their mean top-1')



VALUES: Dict[str, Callable[[Context], object]] = {
    'odevit_tiny_default_steps': _model_row('odevit_tiny_cifar', 'steps'),
    **{f'sgd.{name}.{batch}.{field}': _sgd('reference' if name == 'authors' else 'odevit_tiny_cifar',
                                           {'authors': '-'}.get(name, name), batch, field)
       for name in ('reference_init', 'default', 'default+sqrtdepth', 'authors') for batch in (32, 128)
       for field in ('lambda', 'field', 'nan_at', 'limit', 'updates', 'ratio', 'culprit')},
    'full_epochs': _full_epochs,
    'anytime_inference_weights': _anytime_inference_weights,
    'early_exit_summary': _early_exit_summary,
    'anytime_random_verdict': _anytime_random_verdict,
    'sgd_peak_lr': _sgd_peak_lr,
    'speed_untimed': _speed_untimed,
    'grid_best_own': _grid_best_own,
    'memory_repeat': _memory_repeat,
    'recipe_study.val_images': _budget_images('recipe_study', 'rows.0.budget', r'first (\d+)/class of val/',
                                              per_class=True),
    'recipe_study.val_per_class': _budget_images('recipe_study', 'rows.0.budget', r'first (\d+)/class of val/'),
    'accuracy_vs_params.test_images': _budget_images('accuracy_vs_params', 'runs.odevit_tiny_cifar.budget',
                                                     r'all (\d+) test images'),
    'noise_45k_note': lambda c: _noise_note(c, '45k'),
    'min_seeds': lambda c: MIN_SEEDS,
    **{f'provenance.{n}': (lambda c, n=n: _provenance(c, n)) for n in UNDATED_RESULTS},
    'speed_rewrites': _speed_rewrites,
    'bf16_over_fp32': _bf16_over_fp32,
    'speed_rule': _speed_rule,
    'speed_checked': lambda c: (f'{len(_speed_checks(c))} of the '
                                f'{sum(len(r["cycles"]["cycles"]) for r in releases(c))} release cycles'),
    'release_3_steps_loss.odevit_tiny_cifar.c10': lambda c: _release_depth_loss(c, 'odevit_tiny_cifar.c10'),
    'release_train_depth.odevit_tiny_cifar.c10': lambda c: _release_train_depth(c, 'odevit_tiny_cifar.c10'),
    'release_selection_images': lambda c: _one({r['cycles']['selection']['images'] for r in releases(c)}),
    'inspect_provenance': _inspect_provenance,
    'claims_summary': _claims_summary,
    'distill_choice': _distill_choice,
    'distill_study_cmd': lambda c: DISTILL_STUDY_CMD,
    'pnp_release': _pnp_release,
    'pnp_training': _pnp_training,
    'pnp_cmd': lambda c: PNP_CMD,
    'pnp_reruns': _pnp_reruns,
    'where_measured': _where_measured,
    'dirty_without_diff': _dirty_without_diff,
    'bibtex_odevit': lambda c: _bibtex('arXiv:2511.16501'),
    'authors_odevit': lambda c: _authors(_bibtex('arXiv:2511.16501')),
    'acc_budget': lambda c: c.lookup('accuracy_vs_params', 'runs.odevit_tiny_cifar.budget'),
    'odevit_tiny_params': _model_row('odevit_tiny_cifar', 'params_M'),
    'odevit_tiny_gflops_6': _model_row('odevit_tiny_cifar', 'gflops', steps=6),
    'vit_odevit_params_params': _model_row('vit_odevit_tiny_cifar_params_matched', 'params_M'),
    'vit_odevit_flops_params': _model_row('vit_odevit_tiny_cifar_flops_matched', 'params_M'),
    'vit_odevit_flops_gflops': _model_row('vit_odevit_tiny_cifar_flops_matched', 'gflops'),
    'vit_bvit_params_params': _model_row('vit_tiny_cifar_params_matched', 'params_M'),
    'vit_bvit_params_gflops': _model_row('vit_tiny_cifar_params_matched', 'gflops'),
    'inspect_mass_first': lambda c: _inspect_value(c, 'mass_patches')[0],
    'inspect_mass_last': lambda c: _inspect_value(c, 'mass_patches')[-1],
    'inspect_entropy_first': lambda c: _inspect_value(c, 'cls_attention_entropy')[0],
    'inspect_entropy_last': lambda c: _inspect_value(c, 'cls_attention_entropy')[-1],
    'inspect_lyapunov': lambda c: _inspect_value(c, 'lyapunov_exponent'),
    'inspect_norm_first': lambda c: math.sqrt(_inspect_value(c, 'energy')[0]),
    'inspect_norm_last': lambda c: math.sqrt(_inspect_value(c, 'energy')[-1]),
    'inspect_growth': lambda c: math.sqrt(_inspect_value(c, 'energy')[-1] / _inspect_value(c, 'energy')[0]),
}
for _budget in BUDGETS:
    VALUES[f'sampling.{_budget}'] = lambda c, b=_budget: budget_noise(c, b)['sampling']
    VALUES[f'images.{_budget}'] = lambda c, b=_budget: BUDGETS[b].images(c)
for _cid in CLAIM:
    VALUES[f'claim.{_cid}'] = lambda c, cid=_cid: claim_verdict_of(c, cid)
    VALUES[f'protocol.{_cid}'] = lambda c, cid=_cid: protocol_difference(cid) or "the paper's"
for _model in ('odevit_tiny_cifar', 'bvit_tiny_cifar'):
    VALUES[f'anytime_budget.{_model}'] = lambda c, m=_model: _anytime_budget(c, m)
VALUES['plain_at_4T'] = lambda c: mean(ds(c, 'plain', four_t(c)))
for _script in ('odevit_parity', 'head_init_accuracy', 'recipes_no_nan', 'recipe_study'):
    VALUES[f'commands.{_script}'] = lambda c, s=_script: recorded_commands(c, s)
VALUES['commands.recipes_no_nan_full_epoch'] = lambda c: recorded_commands(
    c, 'recipes_no_nan', lambda r: r['updates_planned'] * r['batch'] >= FULL_EPOCH_IMAGES)
for _cid in COMPARISON:
    for _field in ('delta', 'floor', 'verdict', 'a', 'b', 'abs_delta', 'margin', 't', 'summary', 'result'):
        VALUES[f'{_cid}.{_field}'] = _cmp_value(_cid, _field)
for _tag in ('odevit_tiny_cifar.c10', 'bvit_tiny_cifar.c10'):
    for _key in ('top1', 'top5', 'params', 'epochs', 'wall', 'config', 'checkpoint'):
        VALUES[f'{_tag}.{_key}'] = _release(_tag, _key)


# ---- rendering -----------------------------------------------------------------------------------------
PLACEHOLDER = re.compile(r'\{\{\s*(.+?)\s*\}\}')
COMMENT = re.compile(r'\{#.*?#\}\n?', re.S)


def _format(value, fmt: Optional[str]) -> str:
    if fmt:
        return format(value, fmt)
    if isinstance(value, float):
        return f'{value:.2f}'
    return str(value)


def substitute(expr: str, ctx: Context) -> str:
    expr, _, fmt = expr.partition('|')
    expr, fmt = expr.strip(), fmt.strip() or None
    if expr.startswith('table '):
        name, *args = expr[len('table '):].split()
        return TABLES[name](ctx, *args) if args else TABLES[name](ctx)
    if expr.startswith('=runtime.'):
        return runtime(ctx, expr[len('=runtime.'):])
    if expr.startswith('=trained_on.'):
        return trained_on(ctx, expr[len('=trained_on.'):])
    if expr.startswith('='):
        return _format(VALUES[expr[1:]](ctx), fmt)
    name, sep, path = expr.partition(':')
    if not sep:
        raise KeyError(f'unknown placeholder {{{{ {expr} }}}}: use FILE:PATH, =NAME or table NAME')
    return _format(ctx.lookup(name, path), fmt)


def render(template: str, ctx: Context, source: str = '') -> str:
    def repl(m):
        try:
            return substitute(m.group(1), ctx)
        except Exception as e:  # name the placeholder: a template error must be easy to find
            raise RuntimeError(f'{source}: {{{{ {m.group(1)} }}}}: {type(e).__name__}: {e}') from e
    body = PLACEHOLDER.sub(repl, COMMENT.sub('', template))
    note = (f'<!-- Generated by `make docs` (docs/render.py) from docs/templates/{source} and the result files; '
            f'edit the template, not this file. -->\n')
    return note + body


def _write_atomic(path: pathlib.Path, text: str) -> None:
    """``path`` holds ``text`` afterwards, or what it held before (a temporary file beside it, ``os.replace``d over it;
    timm_odevit._checks.write_atomic's twin: this script imports no torch)."""
    tmp = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--check', action='store_true', help='write nothing; exit 1 if a generated file would change')
    args = p.parse_args(argv)
    ctx = Context()
    stale = []
    for name, out in OUTPUTS.items():
        text = render((TEMPLATES / name).read_text(), ctx, name)
        if out.exists() and out.read_text() == text:
            continue
        stale.append(out.relative_to(ROOT))
        if not args.check:
            _write_atomic(out, text)
    for path in stale:
        print(('stale: ' if args.check else 'wrote ') + str(path))
    return 1 if args.check and stale else 0


if __name__ == '__main__':
    sys.exit(main())
