"""The speed setting of a machine: the selection rule on a fake clock and fake losses, and one tiny real run."""
import io
import json
import math

import pytest

from timm_odevit.cli.scripts import locate_script
from tools import speed


def _has_train_py() -> bool:
    try:
        return bool(locate_script('train.py', download=False))
    except FileNotFoundError:
        return False


needs_train_py = pytest.mark.skipif(not _has_train_py(), reason="timm's train.py not found: --hours builds its loader")


class FakeMachine:
    """make_step for speed.measure: each setting's update advances a fake clock by its cost and returns its loss."""

    def __init__(self, cost, loss):
        self.cost, self.loss, self.now, self.calls = cost, loss, 0., []

    def timer(self):
        return self.now

    def make_step(self, name):
        def step(batch):
            self.calls.append((name, batch))
            self.now += self.cost[name]
            loss = self.loss[name]
            return loss[batch] if isinstance(loss, list) else loss
        return step


def _run(cost, loss, updates=4, **kw):
    m = FakeMachine(cost, loss)
    results = speed.measure(m.make_step, list(range(updates)), settings=list(cost), timer=m.timer, **kw)
    return results, m


def test_fastest_setting_within_one_percent_of_fp32_loss_wins():
    results, _ = _run({'fp32': 1.0, 'bf16': 0.55, 'channels_last': 0.9},
                      {'fp32': 2.00, 'bf16': 2.019, 'channels_last': 2.0})
    assert results['bf16']['seconds'] == pytest.approx(0.55)
    assert speed.choose(results) == 'bf16'
    assert speed.flags('bf16') == ['--amp', '--amp-dtype', 'bfloat16']


def test_a_faster_setting_whose_loss_drifts_past_one_percent_loses():
    results, _ = _run({'fp32': 1.0, 'bf16': 0.55, 'channels_last': 0.9},
                      {'fp32': 2.00, 'bf16': 2.021, 'channels_last': 2.0})
    assert speed.choose(results) == 'channels_last'
    assert speed.flags('channels_last') == ['--channels-last']


def test_non_finite_loss_is_never_chosen_and_fp32_wins_ties():
    results, _ = _run({'fp32': 1.0, 'bf16': 0.5, 'channels_last': 1.0},
                      {'fp32': 2.0, 'bf16': math.nan, 'channels_last': 2.0})
    assert speed.choose(results) == 'fp32' and speed.flags('fp32') == []


def test_a_much_slower_setting_is_dropped_after_its_first_timed_update():
    """bf16 without AVX512-BF16: 20x slower; it runs the warm-up and one timed update, not the rest."""
    results, m = _run({'fp32': 1.0, 'bf16': 20.0}, {'fp32': 2.0, 'bf16': 2.0}, updates=5)
    assert results['bf16']['dropped'].startswith('20.0x slower') and results['bf16']['updates'] == 2
    assert results['fp32']['updates'] == 5 and speed.choose(results) == 'fp32'
    assert [b for name, b in m.calls if name == 'fp32'] == [0, 1, 2, 3, 4]  # the same batches, in order


@pytest.mark.parametrize('cost, chosen', [(0.97, 'fp32'), (0.94, 'channels_last')])
def test_a_gain_within_the_timing_noise_keeps_fp32(cost, chosen):
    """A setting must beat fp32 by 5 % per update: 3 % is noise of a few updates on a shared machine."""
    results, _ = _run({'fp32': 1.0, 'channels_last': cost}, {'fp32': 2.0, 'channels_last': 2.0})
    assert speed.choose(results) == chosen
    assert speed.choose(results, min_speedup=0.0) == 'channels_last'


def test_a_gain_on_a_minority_of_the_paired_updates_keeps_fp32():
    """A median 20 % lower that comes from 3 of 6 updates (the load fell while channels_last ran) is noise: the
    setting must be faster than fp32 on the same batch in at least 2/3 of the timed updates."""
    fp32 = [1.0] * 7
    lucky = [1.0, 0.5, 0.5, 0.5, 1.1, 1.1, 1.1]  # warm-up, then faster in 3 of 6 pairs, median 0.8
    steady = [1.0, 0.9, 0.9, 0.9, 0.9, 1.1, 1.1]  # faster in 4 of 6 pairs, median 0.9
    for costs, chosen in ((lucky, 'fp32'), (steady, 'channels_last')):
        m = FakeMachine({'fp32': None, 'channels_last': None}, {'fp32': 2.0, 'channels_last': 2.0})
        per_update = {'fp32': iter(fp32), 'channels_last': iter(costs)}

        def make_step(name):
            def step(batch):
                m.now += next(per_update[name])
                return 2.0
            return step
        results = speed.measure(make_step, list(range(7)), settings=['fp32', 'channels_last'], timer=m.timer)
        assert results['channels_last']['times'] == pytest.approx(costs[1:])
        assert results['channels_last']['seconds'] < 0.95
        assert speed.choose(results, min_speedup=0.0) == chosen
    assert speed.paired_wins(results, 'channels_last') == pytest.approx(4 / 6)
    assert speed.paired_wins({'fp32': {'seconds': 1.0}, 'bf16': {'seconds': 0.5}}, 'bf16') is None


def test_losses_are_compared_on_the_batches_both_settings_ran():
    losses = {'fp32': [2.0, 2.0, 1.0, 1.0], 'bf16': [2.0, 2.01, 0.0, 0.0]}
    results, _ = _run({'fp32': 1.0, 'bf16': 20.0}, losses, updates=4)
    assert results['bf16']['updates'] == 2 and results['bf16']['losses'] == [2.0, 2.01]
    assert speed.loss_change(results, 'bf16') == pytest.approx(0.0025)  # vs fp32's first two, not its mean 1.5


def test_every_setting_sees_the_same_batches_interleaved():
    _, m = _run({'fp32': 1.0, 'bf16': 1.0}, {'fp32': 2.0, 'bf16': 2.0}, updates=3)
    assert m.calls == [('fp32', 0), ('bf16', 0), ('fp32', 1), ('bf16', 1), ('fp32', 2), ('bf16', 2)]


def test_timing_is_the_median_after_warm_up():
    costs = iter([10.0, 1.0, 3.0, 2.0])  # warm-up 10 s is not counted; median of 1, 3, 2
    m = FakeMachine({'fp32': None}, {'fp32': 2.0})

    def make_step(name):
        def step(batch):
            m.now += next(costs)
            return 2.0
        return step
    results = speed.measure(make_step, [0, 1, 2, 3], settings=['fp32'], timer=m.timer)
    assert results['fp32']['seconds'] == 2.0


@pytest.mark.parametrize('bad, match', [
    (dict(settings=['bf16']), 'fp32'),
    (dict(settings=['fp32', 'fp8']), 'unknown settings'),
    (dict(batches=[0]), 'more batches'),
])
def test_measure_rejects_bad_input(bad, match):
    m = FakeMachine({'fp32': 1.0, 'bf16': 1.0}, {'fp32': 2.0, 'bf16': 2.0})
    kwargs = dict(settings=['fp32', 'bf16'], batches=[0, 1])
    kwargs.update(bad)
    with pytest.raises(ValueError, match=match):
        speed.measure(m.make_step, kwargs.pop('batches'), timer=m.timer, **kwargs)


def test_choose_rejects_bad_input():
    with pytest.raises(ValueError, match='fp32'):
        speed.choose({'bf16': {'seconds': 1.0, 'loss': 2.0}})
    with pytest.raises(ValueError, match='fp32 loss is nan'):
        speed.choose({'fp32': {'seconds': 1.0, 'loss': math.nan}})
    with pytest.raises(ValueError, match='tolerance'):
        speed.choose({'fp32': {'seconds': 1.0, 'loss': 2.0}}, tolerance=1.5)
    with pytest.raises(ValueError, match='min_speedup'):
        speed.choose({'fp32': {'seconds': 1.0, 'loss': 2.0}}, min_speedup=-0.1)
    with pytest.raises(ValueError, match='min_wins'):
        speed.choose({'fp32': {'seconds': 1.0, 'loss': 2.0}}, min_wins=1.5)
    with pytest.raises(ValueError, match='unknown setting'):
        speed.flags('fp16')


@pytest.mark.parametrize('model_kwargs', ['{steps: 1}', '{steps: 2, train_depth: [1, 4]}'])
def test_command_line_prints_the_flags_and_writes_the_record(tmp_path, capsys, model_kwargs):
    """A tiny real measurement (odevit_tiny_cifar, batches of 2 noise images, fp32 vs channels_last); with
    anytime training every setting draws the same depths at the same update, so the losses still compare."""
    config = tmp_path / 'c.yaml'
    config.write_text(f'model: odevit_tiny_cifar\nmodel_kwargs: {model_kwargs}\nnum_classes: 10\nlr: 1.0e-4\n')
    speed.main(['--config', str(config), '--batch-size', '2', '--updates', '2', '--settings', 'fp32',
                'channels_last', '--out', str(tmp_path / 'speed.json')])
    out, err = capsys.readouterr()
    record = json.loads((tmp_path / 'speed.json').read_text())
    assert record['choice'] in ('fp32', 'channels_last') and out.strip() == ' '.join(record['flags'])
    assert 'speed: chose' in err and set(record['results']) == {'fp32', 'channels_last'}
    # same initial weights, same batches, same arithmetic: the layouts agree closely
    assert record['results']['channels_last']['loss'] == pytest.approx(record['results']['fp32']['loss'], rel=1e-4)


def test_model_kwargs_on_the_command_line_replace_the_configs_as_in_train_py(tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('model: odevit_tiny_cifar\nmodel_kwargs: {steps: 2, train_depth: [1, 4]}\nnum_classes: 10\n')
    speed.main(['--config', str(config), '--batch-size', '2', '--updates', '2', '--settings', 'fp32',
                '--model-kwargs', 'steps=3', 'train_depth=[2,3]', '--out', str(tmp_path / 'speed.json')])
    record = json.loads((tmp_path / 'speed.json').read_text())
    assert record['model_kwargs'] == {'steps': 3, 'train_depth': [2, 3], 'num_classes': 10}
    speed.main(['--config', str(config), '--batch-size', '2', '--updates', '2', '--settings', 'fp32',
                '--model-kwargs', 'steps=1', '--out', str(tmp_path / 'speed.json')])
    assert json.loads((tmp_path / 'speed.json').read_text())['model_kwargs'] == {'steps': 1, 'num_classes': 10}
    with pytest.raises(SystemExit):
        speed.main(['--config', str(config), '--model-kwargs', 'steps'])


def test_the_measured_model_starts_from_the_initial_checkpoint(tmp_path):
    import timm
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(7)
    source = timm.create_model('odevit_tiny_cifar', steps=1)
    save_file(source.state_dict(), str(tmp_path / 'w.safetensors'))
    _, model = speed.model_steps('odevit_tiny_cifar', {'steps': 1}, initial_checkpoint=str(tmp_path / 'w.safetensors'))
    torch.testing.assert_close(model.state_dict()['head.weight'], source.state_dict()['head.weight'])
    make_step, _ = speed.model_steps('odevit_tiny_cifar', {'steps': 2, 'train_depth': [1, 2]})
    assert tuple(make_step('fp32').model.train_depth) == (1, 2)  # what update_seconds sets depth by depth
    _, fresh = speed.model_steps('odevit_tiny_cifar', {'steps': 1})
    assert not torch.equal(fresh.state_dict()['head.weight'], source.state_dict()['head.weight'])


def test_command_line_rejects_a_config_without_a_model(tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('lr: 1.0e-4\n')
    with pytest.raises(SystemExit, match='naming a model'):
        speed.main(['--config', str(config)])


@pytest.mark.parametrize('out, words', [('afile/speed.json', 'afile is a file, not a folder'),
                                         ('missing/speed.json', 'missing does not exist'),
                                         ('.', 'is a folder: give the path of a file')])
def test_an_out_path_that_cannot_be_written_fails_before_measuring(tmp_path, monkeypatch, out, words):
    """The measurement takes minutes: a --out that cannot be written is named first (it died after them, the
    measurement lost)."""
    (tmp_path / 'afile').write_text('')
    config = tmp_path / 'c.yaml'
    config.write_text('model: odevit_tiny_cifar\nmodel_kwargs: {steps: 1}\n')
    monkeypatch.setattr(speed, 'select', lambda *a, **k: pytest.fail('measured before checking --out'))
    with pytest.raises(SystemExit, match=f'--out {tmp_path / out}: .*{words}' if out != '.' else words):
        speed.main(['--config', str(config), '--out', str(tmp_path / out)])


@pytest.mark.parametrize('text, words', [
    ('model: odevit_tiny_cifar\nepochs: 1\n  bad: [\n', r'c.yaml, line 3, column 6: not valid YAML'),
    ('model: odevit_tiny_cifar\nmodel_kwargs: [1, 2]\n', r'c.yaml: model_kwargs must be a mapping of name: value'),
    ('model: odevit_tiny_cifar\nkd_ce_start_epoch: x\n', r"c.yaml: kd_ce_start_epoch must be an integer, got 'x'"),
])
def test_a_config_speed_cannot_read_is_named_with_its_key_or_line(tmp_path, text, words):
    config = tmp_path / 'c.yaml'
    config.write_text(text)
    with pytest.raises(SystemExit, match=words):
        speed.main(['--config', str(config)])


# ---- sizing a cycle to the time left (--hours) ---------------------------------------------------
def test_epochs_that_fit_count_training_and_every_evaluation():
    # 45,000 images at 75 img/s = 600 s, + EMA and raw weights on 5,000 at 100 img/s = 100 s: 700 s an epoch
    fit = speed.epochs_that_fit(1.75, 45000, 75.0, 5000, 100.0, evals=2)
    assert fit['epoch_seconds'] == pytest.approx(700.0) and fit['epochs'] == 9  # 6300 s / 700 s
    assert speed.epochs_that_fit(1.75, 45000, 75.0, 5000, 100.0, evals=0)['epochs'] == 10  # 6300 s / 600 s = 10.5
    assert speed.epochs_that_fit(1.0, 45000, 75.0)['epochs'] == 6  # no evaluation: 3600 / 600
    assert speed.epochs_that_fit(1.0, 45000, 75.0, 5000, None, evals=0)['epochs'] == 6


@pytest.mark.parametrize('kw, match', [
    (dict(hours=0.1, train_images=45000, train_img_s=75.0), 'not one epoch fits in 0.1 h: one takes 0.17 h'),
    (dict(hours=0, train_images=10, train_img_s=1.0), 'hours must be a positive'),
    (dict(hours=math.nan, train_images=10, train_img_s=1.0), 'hours must be a positive'),
    (dict(hours=1, train_images=0, train_img_s=1.0), 'train_images >= 1'),
    (dict(hours=1, train_images=10, train_img_s=0.0), 'speeds must be positive'),
    (dict(hours=1, train_images=10, train_img_s=1.0, eval_images=5, eval_img_s=None), 'speeds must be positive'),
])
def test_epochs_that_fit_rejects_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        speed.epochs_that_fit(**kw)


def _image_folder(root, splits):
    from PIL import Image
    for split, per_class in splits.items():
        for c in ('a', 'b'):
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                Image.new('RGB', (32, 32), (40 * i % 255, 7 * i % 255, 90 if c == 'a' else 10)).save(
                    root / split / c / f'{i}.png')
    return root


@needs_train_py
def test_hours_add_the_epochs_that_fit_to_the_flags(tmp_path, capsys):
    """A tiny real measurement on a tiny ImageFolder: the record holds the splits' sizes and both measured speeds,
    and the printed flags end with the epochs they give."""
    data = _image_folder(tmp_path / 'data', {'train': 6, 'val': 2})
    config = tmp_path / 'c.yaml'
    config.write_text('model: odevit_tiny_cifar\nmodel_kwargs: {steps: 1}\nnum_classes: 2\nlr: 1.0e-4\n'
                      'train_split: train\nval_split: val\nmodel_ema: true\nwarmup_epochs: 0.2\ncooldown_epochs: 2\n'
                      'batch_size: 5\nworkers: 1\n')
    speed.main(['--config', str(config), '--data-dir', str(data), '--batch-size', '2', '--updates', '2',
                '--settings', 'fp32', '--hours', '0.5', '--out', str(tmp_path / 'speed.json')])
    out, err = capsys.readouterr()
    fit = json.loads((tmp_path / 'speed.json').read_text())['epochs']
    assert fit['train_images'] == 10 and fit['eval_images'] == 4 and fit['evals'] == 2  # 12 images: 2 whole batches
    # the training speed is train.py's: the config's batch of 5 (not --batch-size 2) from its loader with 1 worker
    assert fit['train_batch_size'] == 5 and fit['train_workers'] == 1
    assert fit['train_img_s'] == pytest.approx(5 / fit['update_seconds'])
    expected = speed.epochs_that_fit(0.5, 10, fit['train_img_s'], 4, fit['eval_img_s'], 2)
    assert fit['epochs_run'] == fit['epochs'] + 2 == expected['epochs']  # the cooldown epochs run too
    assert out.split() == ['--epochs', str(fit['epochs'])] and 'epochs fit in 0.5 h' in err


def _warm_config(tmp_path):
    config = tmp_path / 'c.yaml'
    config.write_text('model: odevit_tiny_cifar\nmodel_kwargs: {steps: 1}\nnum_classes: 2\nwarmup_epochs: 1.0e+9\n'
                      'train_split: train\nval_split: val\nbatch_size: 2\nworkers: 0\n')
    return config


def test_hours_need_the_data(tmp_path):
    config = _warm_config(tmp_path)
    with pytest.raises(SystemExit, match='give --data-dir'):
        speed.main(['--config', str(config), '--hours', '1'])
    with pytest.raises(SystemExit, match='--hours must be positive'):
        speed.main(['--config', str(config), '--data-dir', str(tmp_path), '--hours', '-1'])


@needs_train_py
def test_hours_need_a_warm_up_shorter_than_the_cycle(tmp_path):
    config = _warm_config(tmp_path)
    data = _image_folder(tmp_path / 'data', {'train': 4, 'val': 1})
    with pytest.raises(SystemExit, match='warmup_epochs 1e.09 .* is not shorter than the'):
        speed.main(['--config', str(config), '--data-dir', str(data), '--batch-size', '2', '--updates', '2',
                    '--settings', 'fp32', '--hours', '1'])
    # no warmup_epochs in the config: train.py's default of 5 is what the run would warm up for
    with pytest.raises(ValueError, match='warmup_epochs 5 .* is not shorter than the 5 epochs'):
        speed.check_warmup({'model': 'm'}, 5, 1.0)
    speed.check_warmup({'model': 'm'}, 6, 1.0)
    speed.check_warmup({'model': 'm', 'warmup_epochs': 0}, 1, 1.0)


class FakeLoader:
    """A loader on a fake clock: fetching a batch costs ``load`` seconds (the first one of its first pass
    ``first`` more)."""

    def __init__(self, machine, batches, load, first=0.):
        self.machine, self.batches, self.load, self.first, self.started = machine, batches, load, first, 0

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        self.started += 1
        for i, b in enumerate(self.batches):
            self.machine.now += self.load + (self.first if self.started == 1 and i == 0 else 0.)
            yield b


class DepthMachine(FakeMachine):
    """An update whose cost is its batch's value (a drawn depth), on the fake clock."""

    def make_step(self, name):
        def step(batch):
            self.calls.append((name, batch))
            self.now += batch
            return 1.0
        return step


def test_the_training_speed_counts_the_wait_for_the_loaders_batches():
    """An update as train.py runs it: the wait for the next batch plus the step, averaged (an epoch lasts the sum
    of its updates, whose cost varies with the drawn depth); the workers' slow start is warm-up; a loader shorter
    than the updates starts over."""
    m = DepthMachine({}, {})
    loader = FakeLoader(m, [3, 9, 3, 3], load=0.5, first=30.)
    seconds = speed.loader_speed(m.make_step('fp32'), loader, updates=8, batch_size=4, timer=m.timer)
    assert [b for _, b in m.calls] == [3, 9, 3, 3] * 2 + [3, 9] and loader.started == 3  # 2 untimed + 8 timed
    assert seconds == pytest.approx(0.5 + (3 + 3 + 3 + 9 + 3 + 3 + 3 + 9) / 8)  # the mean; the median would say 3.5
    # the warm-up is what is left out: a slow start would weigh on the mean
    m = DepthMachine({}, {})
    assert speed.loader_speed(m.make_step('fp32'), FakeLoader(m, [1], load=0., first=30.), updates=2, batch_size=4,
                              warmup=0, timer=m.timer) == pytest.approx(16.)
    with pytest.raises(ValueError, match='fewer images than one batch of 4'):
        speed.loader_speed(m.make_step('fp32'), FakeLoader(m, [], load=0.), updates=2, batch_size=4, timer=m.timer)
    with pytest.raises(ValueError, match='at least one timed update'):
        speed.loader_speed(m.make_step('fp32'), loader, updates=0, batch_size=4, timer=m.timer)


def test_the_epochs_update_is_the_mean_over_the_depths_a_model_draws():
    """A train_depth model: each depth of its range timed alike at that depth, then averaged (the expected update
    of uniform draws); the model's range is restored; without train_depth, the plain mean."""
    m = FakeMachine({}, {})

    class Model:
        train_depth, set_to = (3, 7), []

        def set_train_depth(self, depths):
            self.set_to.append(tuple(depths))
            self.train_depth = tuple(depths)

    model = Model()

    def step(batch):
        m.now += (model.train_depth or (7,))[0]  # an update costs its depth (7 without train_depth)
        return 1.0
    step.model = model
    loader = FakeLoader(m, [0, 1], load=0.)
    assert speed.update_seconds(step, loader, 24, 2, timer=m.timer) == pytest.approx(5.0)  # (3+4+5+6+7) / 5
    assert model.set_to == [(3, 3), (4, 4), (5, 5), (6, 6), (7, 7), (3, 7)] and model.train_depth == (3, 7)
    model.train_depth = None
    assert speed.update_seconds(step, loader, 4, 2, timer=m.timer) == pytest.approx(7.0)  # as left: plain mean


@needs_train_py
@pytest.mark.filterwarnings('ignore:This DataLoader will create 4 worker processes')  # built, never iterated
def test_the_training_loader_is_train_pys_for_the_config(tmp_path):
    """train.py's own parser fills what the config leaves out (its 4 workers); the config's augmentation is the
    loader's; what the measurement does not build is an error."""
    import timm
    from timm.data.loader import PrefetchLoader
    data = _image_folder(tmp_path / 'data', {'train': 3})
    model = timm.create_model('odevit_tiny_cifar', steps=1, num_classes=2)
    cfg = {'model': 'odevit_tiny_cifar', 'batch_size': 2, 'scale': [0.5, 1.0], 'hflip': 0.0, 'reprob': 0.25,
           'mixup': 0.0}  # mixup off, as train.py's default
    loader, args = speed.train_loader(cfg, str(data), model)
    assert isinstance(loader, PrefetchLoader) and loader.random_erasing is not None  # train.py's prefetcher erases
    assert (args.batch_size, loader.loader.num_workers, len(loader)) == (2, 4, 3)  # 6 images in batches of 2
    transforms = loader.dataset.transform.transforms
    crop = next(t for t in transforms if type(t).__name__ == 'RandomResizedCropAndInterpolation')
    assert crop.scale == (0.5, 1.0) and len(crop.interpolation) == 2  # train.py's train_interpolation 'random'
    assert not any('Flip' in type(t).__name__ for t in transforms)
    plain, _ = speed.train_loader(dict(cfg, no_prefetcher=True, workers=0), str(data), model)
    assert not isinstance(plain, PrefetchLoader) and plain.num_workers == 0
    for extra in ({'mixup': 0.8}, {'mixup': 1.0}, {'cutmix': 1.0}, {'cutmix_minmax': [0.2, 0.8]}, {'aug_splits': 3},
                  {'naflex_loader': True}, {'model_dtype': 'bfloat16'}, {'train_batches_per_epoch': 10}):
        with pytest.raises(ValueError, match=f"sets {next(iter(extra))}, .* size the cycle with train.py's --epochs"):
            speed.train_loader(dict(cfg, **extra), str(data), model)


@pytest.mark.parametrize('cfg, flag', [
    ({}, (9, 9)),
    ({'cooldown_epochs': 2}, (7, 9)),                                   # train.py runs epochs + cooldown_epochs
    ({'cooldown_epochs': 2, 'warmup_epochs': 1, 'warmup_prefix': True}, (6, 9)),   # + a warm-up prefix
    ({'cooldown_epochs': 2, 'lr_cycle_limit': 2}, (3, 8)),              # two cosine cycles of N epochs
    ({'cooldown_epochs': 1, 'sched_on_updates': True, 'warmup_epochs': 0.2}, (8, 9)),
])
def test_the_epochs_flag_counts_what_timms_scheduler_runs(cfg, flag):
    assert speed.epochs_flag(cfg, 9, 4500, 1.0) == flag
    with pytest.raises(ValueError, match='runs more than the 2 epochs'):
        speed.epochs_flag({'cooldown_epochs': 2}, 2, 4500, 1.0)


@pytest.fixture(scope='module')
def local_teacher(tmp_path_factory):
    """A small timm ViT saved as a local-dir folder (config.json with its model args, model.safetensors)."""
    import timm
    import torch
    torch.manual_seed(3)
    args = {'img_size': 32, 'patch_size': 8, 'depth': 2, 'embed_dim': 48, 'num_heads': 2, 'num_classes': 10}
    folder = tmp_path_factory.mktemp('teacher')
    timm.models.save_for_hf(timm.create_model('vit_tiny_patch16_224', **args), folder, model_args=args)
    return folder


@pytest.mark.parametrize('kind', ['logit', 'trajectory'])
def test_a_teacher_the_config_names_runs_in_every_timed_update(tmp_path, local_teacher, kind):
    """Same weights, same batches: the distilled run's loss is the student's CE plus the teacher's term, so it
    differs from the student-only loss; the record names the teacher."""
    base = 'model: odevit_tiny_cifar\nmodel_kwargs: {steps: 2}\nnum_classes: 10\nlr: 1.0e-4\n'
    records = {}
    for name, extra in (('student', ''), ('kd', f'kd_model_name: local-dir:{local_teacher}\nkd_distill_type: {kind}\n')):
        (tmp_path / f'{name}.yaml').write_text(base + extra)
        records[name] = speed.select(str(tmp_path / f'{name}.yaml'), batch_size=4, updates=2, settings=['fp32'],
                                     log=io.StringIO())
    assert records['student']['teacher'] is None
    assert records['kd']['teacher'] == {'kd_model_name': f'local-dir:{local_teacher}', 'kd_distill_type': kind}
    assert records['kd']['results']['fp32']['loss'] != pytest.approx(records['student']['results']['fp32']['loss'])


def test_a_distillation_the_check_cannot_build_is_an_error(tmp_path, local_teacher):
    config = tmp_path / 'c.yaml'
    config.write_text(f'model: odevit_tiny_cifar\nmodel_kwargs: {{steps: 1}}\nnum_classes: 10\n'
                      f'kd_model_name: local-dir:{local_teacher}\nkd_distill_type: token\n')
    with pytest.raises(SystemExit, match="kd_distill_type 'token'"):
        speed.main(['--config', str(config), '--batch-size', '2', '--updates', '2', '--settings', 'fp32'])
