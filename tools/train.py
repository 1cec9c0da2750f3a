"""The package's train wrapper with a release's records (run from the repository root; not installed):

    python -m tools.train TRAIN_PY_ARGS...     (what python -m timm_odevit.train takes)

In the run folder, beside what train.py writes: ``train_time.json``, each epoch's wall time and machine, summed
across ``--resume`` runs (what ``tools.cycle``, the model card and the studies in bench/ read), and ``summary.csv``
kept one table across ``--resume`` (train.py writes its header again after a resume, and a run killed between an
epoch's row and its checkpoint repeats that epoch).
"""
import csv
import io
import json
import os
import pathlib
import platform
import time
import types
from typing import List, Optional

from timm_odevit._checks import read_json
from timm_odevit.cli.train import main as train_main

from .atomic import write_atomic

_CLOCK = {'last': time.time()}


def hardware() -> str:
    """The machine in words: CPU model, cores and threads, or the GPUs."""
    import torch
    if torch.cuda.is_available():
        return f'{torch.cuda.device_count()}x {torch.cuda.get_device_name()}'
    name = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            name = next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return f'{name}, {os.cpu_count()} CPU cores, {torch.get_num_threads()} threads'


def record_train_time(output_dir: pathlib.Path, epoch: int) -> None:
    """Add the wall time since the previous epoch's end (or the process start) to ``train_time.json`` in the run's
    folder: per epoch, their total across ``--resume`` runs, each epoch's machine (``epoch_hardware``) and every
    machine the epochs ran on (``hardware``: a resume may change the threads). Time spent in an epoch that a kill
    interrupted is not counted."""
    now = time.time()
    path = output_dir / 'train_time.json'
    record = read_json(path) if path.is_file() else {'epochs': {}}
    if not isinstance(record.get('epochs'), dict):
        raise ValueError(f'{path} has no "epochs" table: restore it or move it away to start a new record')
    record['epochs'][str(epoch)] = round(now - _CLOCK['last'], 1)
    record.setdefault('epoch_hardware', {})[str(epoch)] = hardware()
    record['seconds'] = round(sum(record['epochs'].values()), 1)
    # every epoch's, in order
    record['hardware'] = ' / '.join(dict.fromkeys(record['epoch_hardware'].values()))
    write_atomic(path, json.dumps(record, indent=1))
    _CLOCK['last'] = now


def drop_rerun_rows(path: pathlib.Path, epoch: int) -> None:
    """Drop the rows of epochs from ``epoch`` on from the summary.csv at ``path`` (those being run again),
    rewritten whole: an interruption leaves the old table."""
    if not path.is_file() or not path.stat().st_size:
        return
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    kept = [r for r in rows if int(r['epoch']) < epoch]
    if len(kept) < len(rows):
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
        write_atomic(path, text.getvalue())


def add_records(module) -> None:
    """Give timm's train.py module (loaded, not run) an ``update_summary`` that keeps summary.csv one table (its
    header only in a new file) and records the epoch's time; timm itself is untouched."""
    from timm import utils
    update_summary = utils.update_summary

    def recorded_update_summary(epoch, train_metrics, eval_metrics, filename, lr=None, write_header=None,
                                log_wandb=False):
        path = pathlib.Path(filename)
        drop_rerun_rows(path, epoch)
        update_summary(
            epoch,
            train_metrics,
            eval_metrics,
            filename,
            lr=lr,
            write_header=None,
            log_wandb=log_wandb,
        )
        record_train_time(path.parent, epoch)

    module.utils = types.SimpleNamespace(**{**vars(utils), 'update_summary': recorded_update_summary})


def main(argv: Optional[List[str]] = None) -> None:
    train_main(argv, setup=add_records)


if __name__ == '__main__':
    main()
