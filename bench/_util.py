"""Shared helpers for the benchmarks: interleaved timing and result files."""
import hashlib
import io
import json
import os
import pathlib
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from timm_odevit._checks import write_atomic

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))  # tools/ (release tooling, not installed)
from tools.card_extras import gmacs  # noqa: E402
RESULTS = CHECKOUT / 'bench' / 'results'


def time_interleaved(fns: Dict[str, Callable[[], None]], repeats: int, warmup: int = 2) -> Dict[str, Dict[str, float]]:
    """Time each fn `repeats` times, rotating the order every round so drift hits all alike."""
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            fns[n]()
    samples = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            fns[n]()
            samples[n].append(time.perf_counter() - t0)
    return {n: {'median_s': statistics.median(s), 'min_s': min(s), 'repeats': len(s)} for n, s in samples.items()}


def inference_step(fn: Callable, x: torch.Tensor) -> Callable[[], None]:
    """A closure for :func:`time_interleaved`: ``fn(x)`` without autograd, then a wait for the device."""
    def run():
        with torch.no_grad():
            fn(x)
        if x.is_cuda:
            torch.cuda.synchronize()
    return run


def train_step(loss: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """A closure for :func:`time_interleaved`: ``loss()`` (a scalar) and its backward pass, then a wait for the
    device."""
    def run():
        out = loss()
        out.backward()
        if out.is_cuda:
            torch.cuda.synchronize()
    return run


def _git_state() -> Dict[str, object]:
    """``{'commit': HEAD, 'diff': None}`` of the checkout the bench runs from, or ``{'commit': HEAD + '+dirty', 'diff':
    bytes}`` when tracked files other than the results (``bench/results/``, which the benches themselves write) differ
    from it: the diff (``git diff --binary HEAD``) that makes the commit's code the code that ran. ``BENCH_COMMIT`` when
    set (a copy of a checkout sent to another machine, whose git metadata may not be the checkout's); a dirty one
    needs ``BENCH_DIFF``, the file holding that diff (ValueError at import, before anything is measured)."""
    if os.environ.get('BENCH_COMMIT'):
        commit = os.environ['BENCH_COMMIT']
        if '+dirty' not in commit:
            return {'commit': commit, 'diff': None}
        if not os.environ.get('BENCH_DIFF') or not os.path.isfile(os.environ['BENCH_DIFF']):
            raise ValueError(f'BENCH_COMMIT={commit} is dirty: set BENCH_DIFF to the file holding its diff (git diff '
                             '--binary HEAD on the checkout it names), got '
                             f'BENCH_DIFF={os.environ.get("BENCH_DIFF")!r}')
        return {'commit': commit, 'diff': pathlib.Path(os.environ['BENCH_DIFF']).read_bytes()}
    import subprocess

    def git(*a):
        return subprocess.run(['git', '-C', str(CHECKOUT), *a], capture_output=True).stdout
    head = git('rev-parse', 'HEAD').decode().strip() or 'unknown'
    dirty = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)bench/results').strip()
    if not dirty:
        return {'commit': head, 'diff': None}
    return {'commit': head + '+dirty', 'diff': git('diff', '--binary', 'HEAD', '--', '.', ':(exclude)bench/results')}


def _git_commit() -> str:
    """The commit of :func:`_git_state`: HEAD, with '+dirty' when the checkout differs from it."""
    return _git_state()['commit']


_STATE_AT_START = _git_state()  # the code a bench script imported when it started
_COMMIT_AT_START = _STATE_AT_START['commit']


def _keep_diff(diff: bytes) -> Dict[str, str]:
    """Write a dirty checkout's diff beside the results (``bench/results/diffs/<sha256>.diff``, one file per distinct
    diff) and return what a row records of it: its sha256 and path."""
    digest = hashlib.sha256(diff).hexdigest()
    path = RESULTS / 'diffs' / f'{digest}.diff'
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        write_atomic(path, diff)
    return {'diff_sha256': digest, 'diff': f'bench/results/diffs/{digest}.diff'}


def _load_average() -> Optional[List[float]]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # not on this platform, or not obtainable
        return None


def environment() -> Dict[str, str]:
    """Where and how a result was measured: machine (CPU model, cores, threads or the GPU), versions, commit,
    date and the exact command (recorded when measured, never back-filled). The commit is the checkout's when the
    command started (``BENCH_COMMIT`` when set); a dirty one comes with ``diff_sha256`` and ``diff``, the path of its
    diff kept beside the results. If the checkout has moved since, ``checkout_moved_to`` says to what (a row measured
    after the move, or by a subprocess started after it, may have run that code)."""
    import datetime
    import timm
    import torchdiffeq
    if str(CHECKOUT) not in sys.path:
        sys.path.append(str(CHECKOUT))  # tools/ is a package of the checkout, not installed
    from tools.train import hardware
    now = _git_commit()
    commit = now if os.environ.get('BENCH_COMMIT') else _COMMIT_AT_START
    diff = _git_state()['diff'] if os.environ.get('BENCH_COMMIT') else _STATE_AT_START['diff']
    if '+dirty' in commit and diff is None:
        raise ValueError(f'commit {commit} is dirty but its diff is unknown: a result must name code one can check out')
    return {
        'machine': hardware(), 'cpu_cores': os.cpu_count(), 'cpu_threads': torch.get_num_threads(),
        'python': platform.python_version(), 'torch': torch.__version__, 'timm': timm.__version__,
        'torchdiffeq': torchdiffeq.__version__, 'commit': commit, **(_keep_diff(diff) if '+dirty' in commit else {}),
        **({'checkout_moved_to': now} if now != commit else {}),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        # the 1/5/15-minute load averages when the row is written (Unix; in a container, possibly its host's): a lone
        # job of T threads on its own machine reads about T, more means other work shared it
        **({'load_average': load} if (load := _load_average()) else {}),
        'command': ' '.join([os.path.basename(sys.executable)] + sys.argv),
    }


def seed_key(name: str, seed: int) -> str:
    """Result key of a run: ``name`` for seed 0, ``name@seedN`` otherwise (other seeds' rows are kept)."""
    return name if seed == 0 else f'{name}@seed{seed}'


def seed_of(key: str) -> int:
    """Inverse of :func:`seed_key`: the seed a result key belongs to."""
    return int(key.rsplit('@seed', 1)[1]) if '@seed' in key else 0


ROW_TABLES = ('runs', 'rows', 'results')  # where the scripts keep their rows (a dict by key, or a list)
_READ_BACK = {}  # id -> row dict read_result returned (rows carried over from earlier commands), kept alive so that
# no new row can reuse a freed one's id


def _rows(payload: dict) -> list:
    """The row dicts of a payload, also those of the studies it holds (``{'studies': {name: payload}}``)."""
    tables = [payload.get(key) for key in ROW_TABLES]
    studies = payload.get('studies')
    return [row for t in tables if isinstance(t, (dict, list)) for row in (t.values() if isinstance(t, dict) else t)
            if isinstance(row, dict)] + [row for s in (studies.values() if isinstance(studies, dict) else [])
                                         if isinstance(s, dict) for row in _rows(s)]


def read_result(path: pathlib.Path) -> dict:
    """An earlier results file, for a script that keeps its rows: those rows, passed back to :func:`write_result`
    unchanged, keep the record of the command that measured them (or none, never back-filled)."""
    data = json.loads(pathlib.Path(path).read_text())
    _READ_BACK.update((id(row), row) for row in _rows(data))
    return data


def write_result(name: str, payload: dict) -> pathlib.Path:
    """Write ``bench/results/<name>.json`` atomically: the payload with the environment of this command at the top
    and in every row it measured (every row not read back by :func:`read_result`), stamped at the first write that
    holds the row: a command that writes after every run leaves each earlier row's date and commit as they were."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path, env = RESULTS / f'{name}.json', environment()
    for row in _rows(payload):
        if _READ_BACK.get(id(row)) is not row and 'environment' not in row:
            row['environment'] = env
    write_atomic(path, json.dumps({'environment': env, **payload}, indent=2) + '\n')
    return path


def save_figure(fig, path: pathlib.Path, **savefig_kwargs) -> pathlib.Path:
    """``fig.savefig`` as PNG, written atomically (an interrupted run keeps the old picture)."""
    buf = io.BytesIO()
    fig.savefig(buf, format='png', **savefig_kwargs)
    write_atomic(path, buf.getvalue())
    return path


def gflops(model: torch.nn.Module) -> float:
    """GFLOPs of one forward at batch 1 and the model's default input size (multiply-add = 2 FLOPs), attention
    included (:func:`tools.card_extras.gmacs`)."""
    was_training = model.training
    count = 2 * gmacs(model)
    model.train(was_training)
    return count


_PEAK_MEMORY_CHILD = r'''
import json, resource, sys, torch, timm, timm_odevit
batch = int(sys.argv[1])
dev = 'cuda' if torch.cuda.is_available() else 'cpu'
{build}
model = model.to(dev).train()
x = torch.randn(batch, 3, 32, 32, device=dev)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if dev == 'cuda':
    torch.cuda.reset_peak_memory_stats(); base_cuda = torch.cuda.memory_allocated()
model(x).sum().backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {{'peak_mib': (peak - base) / 1024}}
if dev == 'cuda':
    out['peak_mib'] = (torch.cuda.max_memory_allocated() - base_cuda) / 2 ** 20
print(json.dumps(out))
'''


def peak_train_memory_mib(build: str, batch: int) -> float:
    """Peak memory (MiB) of one forward + backward of a 32x32 batch, in a fresh subprocess so that nothing allocated
    before counts. ``build`` is Python source that assigns ``model`` (``torch``, ``timm`` and ``timm_odevit`` are
    imported). CPU: peak resident set size (ru_maxrss) minus its level once the model is built; CUDA:
    ``torch.cuda.max_memory_allocated`` minus what was allocated before the step."""
    import subprocess
    out = subprocess.run([sys.executable, '-c', _PEAK_MEMORY_CHILD.format(build=build), str(batch)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])['peak_mib']
