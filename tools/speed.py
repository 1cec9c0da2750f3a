"""The fastest correct train.py speed setting of this machine: fp32, bf16 autocast, channels_last (and both).

    python -m tools.speed --config train_configs/X.yaml [--data-dir D] [--initial-checkpoint W]
                          [--batch-size 32] [--updates 8] [--hours H] [--model-kwargs k=v ...] [--out speed.json]
    # from the repository root; --model-kwargs: the run's own, which replace the config's whole (as in train.py)

Each setting trains its own copy of the same initial weights on the same batches, one update at a time and
interleaved (a load that changes during the measurement hits every setting alike); the time per update is the
median after a warm-up update. The choice is the fastest setting whose mean training loss stays within 1 % of
fp32's on the same batches and that beats fp32 by at least 5 % (less is timing noise), consistently: in at least
2/3 of the timed updates paired with fp32's (a median of a few updates on a shared machine swings by more); a
setting more than ``max_slowdown`` x slower than fp32 after its first timed update is dropped early.
``--hours H`` sizes the cycle to the time left: the chosen setting's training speed, measured again on batches from
train.py's own training loader for the config (its batch size, augmentation and workers, which share the machine
with the update; the mean of 24 updates, each depth a ``train_depth`` model draws timed alike), its evaluation
speed and the sizes of the config's train and validation splits give the whole epochs that fit in H hours;
``--epochs N``, added to the flags, is the largest N whose run fits them as timm's scheduler counts its epochs (a
warm-up prefix, cycles and cooldown epochs included), so the schedule ends within the time. ``--hours`` needs timm's
train.py (found as ``python -m timm_odevit.train`` finds it, e.g. ``$TIMM_TRAIN_PY``) and refuses a config setting
an option whose cost it does not measure (:data:`UNMEASURED`: mixup, cutmix, AugMix splits, NaFlex, model_dtype,
torchcompile, scheduled sizes, train_batches_per_epoch); loader flags on train.py's command line only (``-b``,
``-j``) are not seen: name them in the config. A teacher the config names
(``kd_model_name``, ``kd_distill_type`` logit or trajectory) runs in every timed update, as in train.py; one given on
train.py's command line only is not measured: name it in the config.
stdout: the flags for train.py (empty for fp32); stderr: the measurement; ``--out``: it as JSON.
"""
import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .atomic import write_atomic

SETTINGS: Dict[str, Tuple[str, ...]] = {
    'fp32': (),
    'bf16': ('--amp', '--amp-dtype', 'bfloat16'),
    'channels_last': ('--channels-last',),
    'bf16+channels_last': ('--amp', '--amp-dtype', 'bfloat16', '--channels-last'),
}
REFERENCE = 'fp32'
TOLERANCE, MIN_SPEEDUP, MIN_WINS = 0.01, 0.05, 2 / 3  # the rule of :func:`choose` (its defaults, the CLI's)
SIZING_UPDATES = 24  # timed updates of --hours's training speed (shared out over a train_depth model's depths)
UNMEASURED = ('mixup', 'cutmix', 'cutmix_minmax', 'aug_splits', 'naflex_loader', 'model_dtype', 'train_img_sizes',
              'train_batch_sizes', 'train_batches_per_epoch', 'torchcompile')  # train.py options --hours refuses


def loss_change(results: Dict[str, Dict], name: str) -> float:
    """Relative change of a setting's mean loss from fp32's on the same batches (the ones both ran)."""
    own, ref = results[name], results[REFERENCE]
    if 'losses' not in own:  # a summary without per-update losses: the means
        return own['loss'] / ref['loss'] - 1
    n = len(own['losses'])
    return (sum(own['losses']) / n) / (sum(ref['losses'][:n]) / n) - 1


def paired_wins(results: Dict[str, Dict], name: str) -> Optional[float]:
    """The fraction of a setting's timed updates that were faster than fp32's update of the same batch (interleaved:
    each pair ran under the same load); None without per-update times."""
    own, ref = results[name].get('times'), results[REFERENCE].get('times')
    if not own or not ref:
        return None
    pairs = list(zip(own, ref))
    return sum(a < b for a, b in pairs) / len(pairs)


def choose(results: Dict[str, Dict[str, float]], tolerance: float = TOLERANCE, min_speedup: float = MIN_SPEEDUP,
           min_wins: float = MIN_WINS) -> str:
    """The fastest setting whose loss is finite and within ``tolerance`` (relative) of fp32's on the same batches;
    a setting other than fp32 must also be at least ``min_speedup`` faster per update than fp32 (median) and faster
    in at least ``min_wins`` of the timed updates paired with fp32's (a smaller or inconsistent gain is timing
    noise, and fp32 is the plain default).

    ``results``: setting -> {'seconds': per update, 'loss': mean loss, optionally 'losses' (per update), 'times'
    (per timed update) and 'dropped' (a reason: such a setting is not a candidate)}. A tie goes to the setting
    listed first."""
    if not 0 <= tolerance < 1 or not 0 <= min_speedup < 1 or not 0 <= min_wins <= 1:
        raise ValueError(f'tolerance and min_speedup are fractions in [0, 1), min_wins in [0, 1]; got '
                         f'{tolerance!r}, {min_speedup!r}, {min_wins!r}')
    if REFERENCE not in results:
        raise ValueError(f'the measurement needs the {REFERENCE} reference; got {sorted(results)}')
    ref = results[REFERENCE]
    if not math.isfinite(ref['loss']):
        raise ValueError(f"the fp32 loss is {ref['loss']}: the model or the batches are broken, no setting can be checked")
    ok = [REFERENCE] + [name for name, r in results.items() if name != REFERENCE and not r.get('dropped')
                        and math.isfinite(r['loss']) and abs(loss_change(results, name)) <= tolerance
                        and r['seconds'] <= (1 - min_speedup) * ref['seconds']
                        and ((wins := paired_wins(results, name)) is None or wins >= min_wins)]
    order = list(results)
    return min(ok, key=lambda name: (results[name]['seconds'], order.index(name)))


def measure(make_step: Callable[[str], Callable], batches: Sequence, settings: Iterable[str] = tuple(SETTINGS),
            timer: Callable[[], float] = time.perf_counter, warmup: int = 1,
            max_slowdown: float = 2.0) -> Dict[str, Dict[str, float]]:
    """Time ``make_step(setting)(batch) -> loss`` over ``batches``, the settings interleaved update by update.

    Returns setting -> {'seconds' (median per update after ``warmup``), 'times' (per timed update), 'loss' (mean
    over the batches run), 'losses' (per update), 'updates', 'dropped' (why a setting stopped early, or '')}."""
    settings = list(settings)
    if REFERENCE not in settings:
        raise ValueError(f'settings must include {REFERENCE!r} (the reference), got {settings}')
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise ValueError(f'unknown settings {unknown}; choose from {list(SETTINGS)}')
    if len(batches) <= warmup:
        raise ValueError(f'need more batches ({len(batches)}) than warm-up updates ({warmup}) to time anything')
    steps = {name: make_step(name) for name in settings}
    times: Dict[str, List[float]] = {name: [] for name in settings}
    losses: Dict[str, List[float]] = {name: [] for name in settings}
    dropped: Dict[str, str] = {}
    for i, batch in enumerate(batches):
        for name in settings:
            if name in dropped:
                continue
            start = timer()
            losses[name].append(float(steps[name](batch)))
            times[name].append(timer() - start)
        if i == warmup:  # the first timed update: drop what is far slower than fp32
            ref = times[REFERENCE][-1]
            for name in settings:
                if name not in dropped and times[name][-1] > max_slowdown * ref:
                    dropped[name] = f'{times[name][-1] / ref:.1f}x slower than fp32'
    out = {}
    for name in settings:
        timed = times[name][warmup:]
        out[name] = {'seconds': statistics.median(timed), 'times': timed, 'loss': sum(losses[name]) / len(losses[name]),
                     'losses': losses[name], 'updates': len(losses[name]), 'dropped': dropped.get(name, '')}
    return out


def epochs_that_fit(hours: float, train_images: int, train_img_s: float, eval_images: int = 0,
                    eval_img_s: Optional[float] = None, evals: int = 1) -> Dict[str, float]:
    """The whole epochs that fit in ``hours`` of wall time. One epoch trains on ``train_images`` at ``train_img_s``
    and evaluates ``evals`` models (the weights, and their EMA) on ``eval_images`` at ``eval_img_s`` (images/s):

        epoch_seconds = train_images / train_img_s + evals * eval_images / eval_img_s,   epochs = floor(3600 H / that)

    Returns {'epochs', 'epoch_seconds', 'hours'}; a ValueError when not one epoch fits, or for bad input."""
    if not (isinstance(hours, (int, float)) and math.isfinite(hours) and hours > 0):
        raise ValueError(f'hours must be a positive number, got {hours!r}')
    if train_images < 1 or eval_images < 0 or evals < 0:
        raise ValueError(f'need train_images >= 1, eval_images >= 0, evals >= 0; got {train_images}, {eval_images}, {evals}')
    rates = [train_img_s] + ([eval_img_s] if eval_images and evals else [])
    if not all(r is not None and math.isfinite(r) and r > 0 for r in rates):
        raise ValueError(f'speeds must be positive images/s, got train {train_img_s!r}, eval {eval_img_s!r}')
    epoch = train_images / train_img_s + (evals * eval_images / eval_img_s if eval_images and evals else 0.)
    epochs = int(hours * 3600 // epoch)
    if epochs < 1:
        raise ValueError(f'not one epoch fits in {hours:g} h: one takes {epoch / 3600:.2f} h at the measured speed '
                         f'({train_images} training images at {train_img_s:.1f} img/s)')
    return {'epochs': epochs, 'epoch_seconds': epoch, 'hours': hours}


def eval_speed(model, batches: Sequence, setting: str, device: str = 'cpu', warmup: int = 1,
               timer: Callable[[], float] = time.perf_counter) -> float:
    """Images/s of ``model``'s evaluation (eval mode, no gradients) under a speed setting: the median over
    ``batches`` after ``warmup``."""
    import copy
    import torch
    if len(batches) <= warmup:
        raise ValueError(f'need more batches ({len(batches)}) than warm-up batches ({warmup}) to time anything')
    model = copy.deepcopy(model).eval()
    channels_last, dtype = layout_and_dtype(setting)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    times = []
    with torch.no_grad():
        for x, _ in batches:
            x = x.to(device)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            start = timer()
            with torch.autocast(device_type=torch.device(device).type, dtype=dtype or torch.float32,
                                enabled=dtype is not None):
                out = model(x)
            (out[-1] if isinstance(out, (list, tuple)) else out).float().sum().item()  # synchronise a GPU
            times.append((timer() - start) / len(x))
    return 1 / statistics.median(times[warmup:])


def split_size(data_dir: str, split: str) -> int:
    """Images in a split of an ImageFolder root, as train.py's ``create_dataset`` reads it."""
    from timm.data import create_dataset
    return len(create_dataset('', root=data_dir, split=split, is_training=False))


def layout_and_dtype(setting: str):
    """(channels_last, autocast dtype or None) of a setting, as its train.py flags set them."""
    import torch
    return '--channels-last' in SETTINGS[setting], (torch.bfloat16 if '--amp' in SETTINGS[setting] else None)


def flags(setting: str) -> List[str]:
    """train.py flags of a setting."""
    if setting not in SETTINGS:
        raise ValueError(f'unknown setting {setting!r}; choose from {list(SETTINGS)}')
    return list(SETTINGS[setting])


def cpu_features() -> List[str]:
    """The CPU features that decide the rows of the speed table (from /proc/cpuinfo; [] elsewhere)."""
    try:
        with open('/proc/cpuinfo') as f:
            present = set(next(line for line in f if line.startswith('flags')).split(':', 1)[1].split())
    except (OSError, StopIteration):
        return []
    return [f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile') if f in present]


# ---- the model and the batches ------------------------------------------------------------------
def load_batches(data_dir: Optional[str], model, batch_size: int, count: int, split: str = 'train', seed: int = 0,
                 cfg: Optional[dict] = None):
    """``count`` batches of (images, labels): a seeded random choice of ``split`` images with the eval
    preprocessing of the model and the config ``cfg`` (its ``input_size``, ``mean``...: as train.py resolves them; no
    augmentation: every setting sees the same tensors), or seeded noise without a data dir."""
    import torch
    from timm.data import resolve_data_config
    gen = torch.Generator().manual_seed(seed)
    data = resolve_data_config(dict(cfg or {}), model=model)
    size = data['input_size']
    n = batch_size * count
    if not data_dir:
        images = torch.randn(n, *size, generator=gen)
        labels = torch.randint(0, model.num_classes, (n,), generator=gen)
    else:
        from timm.data import create_dataset, create_transform
        dataset = create_dataset('', root=data_dir, split=split, is_training=False)
        if len(dataset) < n:
            raise ValueError(f'{data_dir}/{split} has {len(dataset)} images, fewer than {count} batches of {batch_size}')
        dataset.transform = create_transform(**data, is_training=False)
        picks = torch.randperm(len(dataset), generator=gen)[:n].tolist()
        samples = [dataset[i] for i in picks]
        images = torch.stack([s[0] for s in samples])
        labels = torch.tensor([int(s[1]) for s in samples])
    return [(images[i:i + batch_size], labels[i:i + batch_size]) for i in range(0, n, batch_size)]


def read_config(path) -> dict:
    """A train.py ``--config`` YAML file, whose values train.py's argparse never converts; ValueError naming the file
    (the line of a syntax error) or the key: ``model_kwargs`` / ``kd_model_kwargs`` must be mappings, the numeric
    ``kd_*`` flags numbers (a string converted as argparse converts it)."""
    from timm_odevit._checks import check_dict, is_int, is_real, read_yaml
    from timm_odevit.cli.train import KD_FLAGS
    cfg = read_yaml(path)
    for key in ('model_kwargs', 'kd_model_kwargs'):
        if cfg.get(key) is not None:
            cfg[key] = check_dict(f'{path}: {key}', cfg[key])
    for key, spec in KD_FLAGS.items():
        kind = spec.get('type')
        value = cfg.get(key)
        if kind not in (int, float) or value is None:
            continue
        try:
            value = kind(value) if isinstance(value, str) else value
        except ValueError:
            pass
        if not (is_int(value) if kind is int else is_real(value)):
            raise ValueError(f"{path}: {key} must be {'an integer' if kind is int else 'a number'}, got {cfg[key]!r}")
        cfg[key] = value
    return cfg


def teacher_of(cfg: dict) -> Optional[Dict]:
    """The distillation a train.py config or a run's args.yaml names: the teacher (``kd_model_name``), the kind
    (``kd_distill_type``, train.py's default logit) and the trajectory flags it sets away from their defaults; None
    without a teacher. Two runs with the same one cost the same per update."""
    from timm_odevit.cli.train import TRAJECTORY_DEFAULTS
    if not cfg.get('kd_model_name'):
        return None
    return {'kd_model_name': cfg['kd_model_name'], 'kd_distill_type': cfg.get('kd_distill_type') or 'logit',
            **{k: cfg[k] for k, default in TRAJECTORY_DEFAULTS.items() if k in cfg and cfg[k] != default}}


def distillation_task(student, cfg: dict, device: str = 'cpu'):
    """The distillation task train.py builds for a config's ``kd_*`` keys (``kd_model_name``: the teacher): timm's
    logit KD, or this package's trajectory distillation as the wrapper builds it; ValueError for another kind."""
    import torch
    from timm.task import LogitDistillationTask
    from timm_odevit.cli.train import KD_FLAGS, trajectory_task
    kind, teacher = check_distillation(cfg), cfg['kd_model_name']
    common = dict(criterion=torch.nn.CrossEntropyLoss(), device=torch.device(device), verbose=False,
                  **{k: cfg.get(k) for k in ('distill_loss_weight', 'task_loss_weight')})  # as train.py passes them
    if kind == 'logit':
        return LogitDistillationTask(student, teacher, loss_type=cfg.get('kd_loss_type', 'kl'),
                                     temperature=float(cfg.get('kd_temperature', 4.0)), **common)
    # the config as train.py's args: the wrapper's --kd-* flags (their defaults where unset) and the normalisation
    args = argparse.Namespace(mean=cfg.get('mean'), std=cfg.get('std'),
                              **{k: cfg.get(k, spec['default']) for k, spec in KD_FLAGS.items()})
    return trajectory_task(args, student, teacher, **common)


def check_distillation(cfg: dict) -> str:
    """The config's kind of distillation; ValueError for one the speed check cannot build."""
    kind = cfg.get('kd_distill_type') or 'logit'
    if kind not in ('logit', 'trajectory'):
        raise ValueError(f"kd_distill_type {kind!r}: the speed check builds logit and trajectory distillation only")
    return kind


def model_steps(model_name: str, model_kwargs: dict, lr: float = 5e-4, device: str = 'cpu', seed: int = 0,
                initial_checkpoint: Optional[str] = None, kd: Optional[dict] = None):
    """``make_step`` for :func:`measure`: each setting trains its own copy of one initial model (AdamW,
    cross-entropy), as train.py would run it with the setting's flags; ``initial_checkpoint``: its weights, loaded
    as train.py's ``--initial-checkpoint`` loads them (a cycle's start: the released weights); ``kd``: a config with
    a teacher (``kd_model_name``): every update runs its :func:`distillation_task`, the teacher's forward included."""
    import copy
    import timm
    import torch
    import timm_odevit  # noqa: F401
    torch.manual_seed(seed)
    initial = timm.create_model(model_name, **model_kwargs)
    if initial_checkpoint:
        timm.models.load_checkpoint(initial, initial_checkpoint)
    initial = initial.to(device)

    def make_step(setting: str):
        model = copy.deepcopy(initial).train()
        channels_last, dtype = layout_and_dtype(setting)
        if channels_last:
            model.to(memory_format=torch.channels_last)
        task = distillation_task(model, kd, device) if kd else None
        trained = task.get_trainable_module() if task is not None else model  # what train.py's optimizer gets
        optimizer = torch.optim.AdamW(trained.parameters(), lr=lr)
        updates = iter(range(1 << 30))

        def step(batch) -> float:
            # the same random draws for every setting at the same update (dropout masks, train_depth's depths)
            torch.manual_seed(seed + 1 + next(updates))
            x, y = (t.to(device) for t in batch)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device_type=torch.device(device).type, dtype=dtype or torch.float32,
                                enabled=dtype is not None):
                if task is not None:
                    loss = task(x, y)['loss']
                else:
                    out = model(x)
                    loss = torch.nn.functional.cross_entropy(out[-1] if isinstance(out, (list, tuple)) else out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss.item()  # synchronises a GPU: the timer sees the whole update
        step.model = model  # for :func:`update_seconds`: the depth it trains at
        return step
    return make_step, initial


def select(config: str, data_dir: Optional[str] = None, batch_size: int = 32, updates: int = 8,
           settings: Iterable[str] = tuple(SETTINGS), tolerance: float = TOLERANCE, device: Optional[str] = None,
           log=None, min_speedup: float = MIN_SPEEDUP, initial_checkpoint: Optional[str] = None,
           hours: Optional[float] = None, model_kwargs: Optional[dict] = None) -> Dict:
    """Measure the settings for the model of a train.py ``--config`` YAML; returns the record (choice, flags,
    per-setting results, machine), also written to ``log``. ``hours``: also size the cycle to that much wall time
    (:func:`epochs_that_fit`, record['epochs']); needs ``data_dir`` (the splits' sizes). ``model_kwargs``: the run's
    ``--model-kwargs``, which replace the config's ``model_kwargs`` whole, as in train.py."""
    import torch
    from timm_odevit.checkpoint import check_model_source
    from .train import hardware
    log = log or sys.stderr
    cfg = read_config(config)
    if not cfg.get('model'):
        raise ValueError(f'{config} is not a train.py config naming a model (key "model")')
    for key in ('model', 'kd_model_name'):
        check_model_source(cfg.get(key))
    if hours is not None and not data_dir:
        raise ValueError('--hours sizes the epochs from the splits\' sizes: give --data-dir')
    if hours is not None and not (math.isfinite(hours) and hours > 0):
        raise ValueError(f'--hours must be positive, got {hours!r}')
    if updates < 2 or batch_size < 1:
        raise ValueError(f'need updates >= 2 (one warm-up, one timed) and batch_size >= 1; got {updates}, {batch_size}')
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    if model_kwargs is not None:
        cfg['model_kwargs'] = model_kwargs
    kwargs = dict(cfg.get('model_kwargs') or {}, num_classes=cfg.get('num_classes', 10))
    teacher = teacher_of(cfg)
    if teacher:
        check_distillation(cfg)
    make_step, model = model_steps(cfg['model'], kwargs, lr=float(cfg.get('lr', 5e-4)), device=device,
                                   initial_checkpoint=initial_checkpoint, kd=cfg if teacher else None)
    batches = load_batches(data_dir, model, batch_size, updates, split=cfg.get('train_split', 'train'), cfg=cfg)
    results = measure(make_step, batches, settings)
    choice = choose(results, tolerance, min_speedup)
    record = {'choice': choice, 'flags': flags(choice), 'results': results, 'tolerance': tolerance,
              'min_speedup': min_speedup, 'initial_checkpoint': initial_checkpoint,
              'model': cfg['model'], 'model_kwargs': kwargs, 'batch_size': batch_size, 'updates': updates,
              'teacher': teacher,
              'data': data_dir or 'random noise (loss check weaker than on images)', 'device': device,
              'hardware': hardware(), 'cpu_features': cpu_features(), 'torch': torch.__version__}
    for name, r in results.items():
        print(f"speed: {name:>20}: {r['seconds'] * 1e3:8.1f} ms/update ({batch_size / r['seconds']:.1f} img/s), "
              f"loss {r['loss']:.4f} ({100 * loss_change(results, name):+.2f} % vs fp32 on the same "
              f"{r['updates']} batches)"
              + (f", faster than fp32 in {paired_wins(results, name):.0%} of the paired updates"
                 if name != REFERENCE and not r['dropped'] else '')
              + (f"; dropped: {r['dropped']}" if r['dropped'] else ''), file=log)
    ran = f"; every update ran the teacher {teacher['kd_model_name']}" if teacher else ''
    print(f"speed: chose {choice} ({' '.join(record['flags']) or 'no flags'}) on {record['hardware']}, "
          f"CPU features {record['cpu_features']}{ran}", file=log)
    if hours is not None:
        record['epochs'] = fit_epochs(cfg, data_dir, model, batches, choice, make_step(choice), hours, device, log)
    return record


def check_warmup(cfg: dict, epochs: int, hours: float) -> None:
    """A ValueError when the config's warm-up (train.py's default of 5 epochs when it sets none) is not shorter
    than the cycle's ``epochs``."""
    warmup = float(cfg.get('warmup_epochs', 5) or 0)
    if warmup >= epochs:
        raise ValueError(f"warmup_epochs {warmup:g} of {cfg.get('model')}'s config is not shorter than the {epochs} "
                         f"epochs that fit in {hours:g} h: give more hours or a shorter warm-up (warmup_epochs)")


def fit_epochs(cfg: dict, data_dir: str, model, batches: Sequence, choice: str, step: Callable, hours: float,
               device: str, log, updates: int = SIZING_UPDATES) -> Dict:
    """record['epochs'] of :func:`select`: the chosen setting's evaluation speed (on ``batches``) and training speed
    (``step`` fed by train.py's loader, :func:`loader_speed`), the images an epoch trains on (whole batches of the
    train split), the validation split and EMA -> the whole epochs that fit in ``hours``."""
    train_split, val_split = cfg.get('train_split', 'train'), cfg.get('val_split', 'validation')
    eval_img_s = eval_speed(model, batches, choice, device)
    loader, args = train_loader(cfg, data_dir, model, device)
    seconds = update_seconds(step, loader, updates, args.batch_size)
    sizes = {'train_images': len(loader) * args.batch_size, 'eval_images': split_size(data_dir, val_split)}
    del loader  # its persistent workers stop here
    train_img_s = args.batch_size / seconds
    evals = 2 if cfg.get('model_ema') else 1
    fit = epochs_that_fit(hours, sizes['train_images'], train_img_s, sizes['eval_images'], eval_img_s, evals)
    fits = fit['epochs']
    fit['epochs'], fit['epochs_run'] = epochs_flag(cfg, fits, sizes['train_images'], hours)
    check_warmup(cfg, fit['epochs'], hours)
    fit.update(sizes, train_img_s=train_img_s, eval_img_s=eval_img_s, evals=evals, train_batch_size=args.batch_size,
               train_workers=args.workers, update_seconds=seconds, updates_timed=updates)
    print(f"speed: {fits} epochs fit in {hours:g} h ({fit['epoch_seconds'] / 60:.1f} min each: "
          f"{sizes['train_images']} '{train_split}' images at {train_img_s:.1f} img/s from train.py's loader "
          f"(batch {args.batch_size}, {args.workers} workers; mean of {updates} updates), {evals} x "
          f"{sizes['eval_images']} '{val_split}' images at {eval_img_s:.1f} img/s): --epochs {fit['epochs']} runs "
          f"{fit['epochs_run']}", file=log)
    return fit


def loader_speed(step: Callable, loader, updates: int, batch_size: int, warmup: int = 2,
                 timer: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per training update as train.py runs it: the wait for ``loader``'s next batch plus ``step(batch)``
    (the loader's workers decode and augment on the cores the update uses), averaged over ``updates`` timed updates
    after ``warmup`` untimed ones (the workers' start). The mean, not the median: an epoch lasts the sum of its
    updates, whose cost varies by design with ``train_depth``'s drawn depths. The loader starts over when it runs out."""
    if len(loader) < 1:
        raise ValueError(f'the training split has fewer images than one batch of {batch_size}: nothing to time')
    if updates < 1:
        raise ValueError(f'need at least one timed update, got {updates}')
    times, batches = [], iter(loader)
    for _ in range(warmup + updates):
        start = timer()
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            batch = next(batches)
        step(batch)
        times.append(timer() - start)
    return statistics.fmean(times[warmup:])


def update_seconds(step: Callable, loader, updates: int, batch_size: int, **kw) -> float:
    """:func:`loader_speed` of an epoch's average update. For a model that draws its depth per update uniformly from
    ``train_depth`` (lo, hi) (``step.model``), each depth is timed alike at that fixed depth and the times averaged:
    the expected update, not the mean of a few seeded draws (the same draws every run, a fixed bias)."""
    model = getattr(step, 'model', None)
    depths = getattr(model, 'train_depth', None)
    if not depths:
        return loader_speed(step, loader, updates, batch_size, **kw)
    each = math.ceil(updates / (depths[1] - depths[0] + 1))
    try:
        times = []
        for depth in range(depths[0], depths[1] + 1):
            model.set_train_depth((depth, depth))
            times.append(loader_speed(step, loader, each, batch_size, **kw))
    finally:
        model.set_train_depth(depths)
    return statistics.fmean(times)


def train_loader(cfg: dict, data_dir: str, model, device: str = 'cpu'):
    """(loader, args): the training loader timm's train.py builds for a config, and train.py's args for it (its
    parser's defaults for the keys the config leaves out): dataset, batch size, augmentation, workers, prefetcher; a
    ValueError for a config that sets an option of :data:`UNMEASURED` away from train.py's default."""
    import torch
    from timm.data import create_dataset, create_loader, resolve_data_config
    from timm_odevit.cli.scripts import load_script, locate_script
    parser = load_script(locate_script('train.py')).parser
    defaults = {k: parser.get_default(k) for k in UNMEASURED}
    parser.set_defaults(**cfg)
    args = parser.parse_args(['--data-dir', data_dir])
    unmeasured = [k for k in UNMEASURED if getattr(args, k, defaults[k]) != defaults[k]]
    if unmeasured:
        raise ValueError(f"{cfg.get('model')}'s config sets {', '.join(unmeasured)}, whose effect on an epoch's time "
                         "--hours does not measure: size the cycle with train.py's --epochs instead")
    data = resolve_data_config(vars(args), model=model)
    dataset = create_dataset(args.dataset, root=data_dir, split=args.train_split, is_training=True,
                             class_map=args.class_map, batch_size=args.batch_size, seed=args.seed,
                             repeats=args.epoch_repeats)
    return create_loader(
        dataset, input_size=data['input_size'], batch_size=args.batch_size, is_training=True, no_aug=args.no_aug,
        re_prob=args.reprob, re_mode=args.remode, re_count=args.recount, re_split=args.resplit,
        train_crop_mode=args.train_crop_mode, scale=args.scale, ratio=args.ratio, hflip=args.hflip, vflip=args.vflip,
        color_jitter=args.color_jitter, color_jitter_prob=args.color_jitter_prob, grayscale_prob=args.grayscale_prob,
        gaussian_blur_prob=args.gaussian_blur_prob, auto_augment=args.aa, num_aug_repeats=args.aug_repeats,
        interpolation=data['interpolation'] if args.no_aug or not args.train_interpolation else args.train_interpolation,
        num_workers=args.workers, worker_seeding=args.worker_seeding, mean=data['mean'], std=data['std'],
        pin_memory=args.pin_mem, device=torch.device(device), use_prefetcher=not args.no_prefetcher), args


def epochs_flag(cfg: dict, fits: int, train_images: int, hours: float) -> Tuple[int, int]:
    """(N, the epochs train.py then runs): the largest ``--epochs N`` whose run, as timm's scheduler counts it for the
    config (a warm-up prefix, cycles and cooldown epochs included), is at most the ``fits`` epochs that fit."""
    import torch
    from timm.scheduler import create_scheduler_v2, scheduler_kwargs
    args = argparse.Namespace(**dict({'sched': 'cosine'}, **cfg))  # train.py's default schedule
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=float(cfg.get('lr', 0.1)))
    updates = max(1, train_images // int(cfg.get('batch_size', 128)))
    for n in range(fits, 0, -1):
        run = create_scheduler_v2(optimizer, **dict(scheduler_kwargs(args), num_epochs=n), updates_per_epoch=updates)[1]
        if run <= fits:
            return n, run
    raise ValueError(f"{cfg.get('model')}'s schedule (warm-up prefix, cycles, cooldown_epochs) runs more than the "
                     f"{fits} epochs that fit in {hours:g} h at any --epochs: give more hours or a shorter schedule")


def check_output_file(name: str, path) -> pathlib.Path:
    """``path`` as a Path; ValueError naming ``name`` unless a file can be written there (its folder exists and is
    writable, and it is no folder itself): checked before the work whose result it will hold."""
    path = pathlib.Path(path)
    folder = path.parent
    if path.is_dir():
        raise ValueError(f'{name} {path} is a folder: give the path of a file')
    if not folder.is_dir():
        why = 'is a file, not a folder' if folder.exists() else 'does not exist: create it first'
        raise ValueError(f'{name} {path}: {folder} {why}')
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f'{name} {path}: the folder {folder} is not writable')
    return path


def main(argv=None) -> None:
    from timm.utils import ParseKwargs  # train.py's parser of --model-kwargs
    p = argparse.ArgumentParser(description="Pick train.py's speed flags for this machine (printed on stdout).")
    p.add_argument('--config', required=True, help='the train.py --config YAML of the run (model, model_kwargs)')
    p.add_argument('--data-dir', default=None, help='ImageFolder root; without it the batches are noise')
    p.add_argument('--initial-checkpoint', default=None, help="the run's starting weights (default: a fresh init)")
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--updates', type=int, default=8, help='updates per setting, the first untimed')
    p.add_argument('--settings', nargs='+', default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument('--tolerance', type=float, default=TOLERANCE, help='loss within this fraction of fp32\'s')
    p.add_argument('--min-speedup', type=float, default=MIN_SPEEDUP, help='a setting must beat fp32 by this fraction')
    p.add_argument('--device', default=None)
    p.add_argument('--hours', type=float, default=None,
                   help='size the cycle to this much wall time: add --epochs N, the whole epochs that fit (needs '
                        '--data-dir)')
    p.add_argument('--model-kwargs', nargs='*', default=None, action=ParseKwargs,
                   help="the run's train.py --model-kwargs (replace the config's model_kwargs whole, as there)")
    p.add_argument('--out', default=None, help='write the measurement here as JSON')
    try:
        args = p.parse_args(argv)
    except ValueError as e:  # ParseKwargs on a word without '='
        p.error(f'--model-kwargs takes key=value words ({e})')
    try:
        if args.out:  # before the measurement, which a path that cannot be written would lose
            check_output_file('--out', args.out)
        record = select(args.config, args.data_dir, args.batch_size, args.updates, args.settings, args.tolerance,
                        args.device, min_speedup=args.min_speedup, initial_checkpoint=args.initial_checkpoint,
                        hours=args.hours, model_kwargs=args.model_kwargs)
    except (ValueError, OSError) as e:
        raise SystemExit(f'error: {e}')
    if args.out:
        write_atomic(args.out, json.dumps(record, indent=1) + '\n')
    print(' '.join(record['flags'] + (['--epochs', str(record['epochs']['epochs'])] if 'epochs' in record else [])))


if __name__ == '__main__':
    main()
