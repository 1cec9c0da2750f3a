"""bench/_util.py: every result row records where and how it was measured, when it is measured."""
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'bench'))
import _util  # noqa: E402  (bench/ is a folder of scripts, not a package)


def test_rows_measured_now_get_the_environment_and_rows_read_back_keep_theirs(tmp_path, monkeypatch):
    monkeypatch.setattr(_util, 'RESULTS', tmp_path)
    monkeypatch.setattr(_util.sys, 'argv', ['bench/x.py', '--seed', '1'])
    (tmp_path / 'x.json').write_text(json.dumps({'runs': {'old': {'top1': 50.0}}, 'rows': [{'v': 1}]}))
    earlier = _util.read_result(tmp_path / 'x.json')
    # a re-measured row equal to the old one is still measured now; the rows read back are carried over
    _util.write_result('x', {'runs': {**earlier['runs'], 'new': {'top1': 30.0}}, 'rows': earlier['rows'] + [{'v': 1}]})
    out = json.loads((tmp_path / 'x.json').read_text())
    env = out['environment']
    assert {'machine', 'cpu_cores', 'torch', 'commit', 'date', 'command'} <= set(env)
    if hasattr(os, 'getloadavg'):  # what else the machine ran (Unix)
        assert len(env['load_average']) == 3 and all(x >= 0 for x in env['load_average'])
    assert env['command'].endswith('bench/x.py --seed 1')
    assert 'environment' not in out['runs']['old'] and 'environment' not in out['rows'][0]  # never back-filled
    assert out['runs']['new']['environment'] == out['rows'][1]['environment'] == env
    monkeypatch.setattr(_util.sys, 'argv', ['bench/x.py', '--seed', '2'])
    again = _util.read_result(tmp_path / 'x.json')
    _util.write_result('x', {'runs': again['runs']})  # read back: each row keeps the record of the run that measured it
    assert json.loads((tmp_path / 'x.json').read_text())['runs']['new']['environment']['command'].endswith('--seed 1')


def test_a_new_row_is_stamped_even_where_a_row_read_back_earlier_was_freed(tmp_path, monkeypatch):
    # the scripts re-read their file before every write; a freed row's id must not hide a new row (it did: CPython
    # reuses ids, and rows measured in the same command went out without their environment)
    monkeypatch.setattr(_util, 'RESULTS', tmp_path)
    _util.write_result('x', {'rows': [{'seed': 0}]})
    for seed in range(1, 30):
        rows = _util.read_result(tmp_path / 'x.json')['rows'] + [{'seed': seed}]
        _util.write_result('x', {'rows': rows})
        del rows
    assert all('environment' in r for r in json.loads((tmp_path / 'x.json').read_text())['rows'])


def test_a_row_keeps_the_stamp_of_its_first_write_when_the_command_writes_again(tmp_path, monkeypatch):
    # a study writes after every run; its earlier rows must keep the date and commit of when they were measured
    monkeypatch.setattr(_util, 'RESULTS', tmp_path)
    monkeypatch.setenv('BENCH_COMMIT', 'first')
    runs = {'a': {'top1': 1.0}}
    _util.write_result('x', {'runs': runs})
    monkeypatch.setenv('BENCH_COMMIT', 'second')
    runs['b'] = {'top1': 2.0}
    _util.write_result('x', {'runs': runs})
    out = json.loads((tmp_path / 'x.json').read_text())['runs']
    assert out['a']['environment']['commit'] == 'first' and out['b']['environment']['commit'] == 'second'


def test_rows_of_nested_studies_get_the_environment_and_bench_commit_names_the_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(_util, 'RESULTS', tmp_path)
    monkeypatch.setenv('BENCH_COMMIT', 'abc123')
    _util.write_result('x', {'studies': {'m': {'rows': [{'arm': 'fixed'}]}}})
    row = json.loads((tmp_path / 'x.json').read_text())['studies']['m']['rows'][0]
    assert row['environment']['commit'] == 'abc123'


def test_the_commit_is_the_one_the_command_started_at_and_a_move_of_the_checkout_is_recorded(monkeypatch):
    monkeypatch.delenv('BENCH_COMMIT', raising=False)
    monkeypatch.setattr(_util, '_COMMIT_AT_START', 'started')
    monkeypatch.setattr(_util, '_git_commit', lambda: 'started')
    assert _util.environment()['commit'] == 'started' and 'checkout_moved_to' not in _util.environment()
    monkeypatch.setattr(_util, '_git_commit', lambda: 'pulled')  # e.g. a `git pull` while the study ran
    env = _util.environment()
    assert env['commit'] == 'started' and env['checkout_moved_to'] == 'pulled'


def test_the_commit_is_dirty_for_changed_code_not_for_the_results_the_benches_write(tmp_path, monkeypatch):
    monkeypatch.delenv('BENCH_COMMIT', raising=False)
    monkeypatch.setattr(_util, 'CHECKOUT', tmp_path)
    (tmp_path / 'bench' / 'results').mkdir(parents=True)
    (tmp_path / 'bench' / 'results' / 'x.json').write_text('{}')
    (tmp_path / 'model.py').write_text('a = 1')

    def git(*a):
        return subprocess.run(['git', '-C', str(tmp_path), '-c', 'user.name=t', '-c', 'user.email=t@t', *a],
                              check=True, capture_output=True, text=True).stdout.strip()
    git('init', '-q')
    git('add', '.')
    git('commit', '-qm', 'x')
    head = git('rev-parse', 'HEAD')
    (tmp_path / 'bench' / 'results' / 'x.json').write_text('{"rows": []}')
    assert _util._git_commit() == head
    (tmp_path / 'model.py').write_text('a = 2')
    assert _util._git_commit() == head + '+dirty'


def test_a_dirty_checkout_keeps_its_diff_beside_the_result(tmp_path, monkeypatch):
    """Issue 62: a '+dirty' commit alone names code nobody can check out; the row records the diff's sha256 and the
    diff is kept in bench/results/diffs/, so HEAD plus that diff is the code that ran."""
    monkeypatch.delenv('BENCH_COMMIT', raising=False)
    checkout = tmp_path / 'checkout'
    monkeypatch.setattr(_util, 'CHECKOUT', checkout)
    monkeypatch.setattr(_util, 'RESULTS', checkout / 'bench' / 'results')
    (checkout / 'bench' / 'results').mkdir(parents=True)
    (checkout / 'model.py').write_text('a = 1\n')

    def git(*a):
        return subprocess.run(['git', '-C', str(checkout), '-c', 'user.name=t', '-c', 'user.email=t@t', *a],
                              check=True, capture_output=True, text=True).stdout.strip()
    git('init', '-q')
    git('add', '.')
    git('commit', '-qm', 'x')
    (checkout / 'model.py').write_text('a = 2\n')
    state = _util._git_state()
    monkeypatch.setattr(_util, '_STATE_AT_START', state)
    monkeypatch.setattr(_util, '_COMMIT_AT_START', state['commit'])
    env = json.loads(_util.write_result('x', {'rows': [{'v': 1}]}).read_text())['rows'][0]['environment']
    assert env['commit'] == git('rev-parse', 'HEAD') + '+dirty'
    diff = checkout / env['diff']
    assert diff.parent == checkout / 'bench' / 'results' / 'diffs'
    assert hashlib.sha256(diff.read_bytes()).hexdigest() == env['diff_sha256']
    git('checkout', '--', 'model.py')
    git('apply', str(diff))  # HEAD + the kept diff is the code that ran
    assert (checkout / 'model.py').read_text() == 'a = 2\n'


def test_a_dirty_bench_commit_needs_its_diff(tmp_path, monkeypatch):
    monkeypatch.setattr(_util, 'RESULTS', tmp_path)
    monkeypatch.setenv('BENCH_COMMIT', 'abc123+dirty')
    monkeypatch.delenv('BENCH_DIFF', raising=False)
    with pytest.raises(ValueError, match='BENCH_COMMIT=abc123\\+dirty is dirty: set BENCH_DIFF'):
        _util._git_state()
    (tmp_path / 'change.diff').write_bytes(b'diff --git a/m.py b/m.py\n')
    monkeypatch.setenv('BENCH_DIFF', str(tmp_path / 'change.diff'))
    env = json.loads(_util.write_result('x', {'rows': [{}]}).read_text())['environment']
    assert env['commit'] == 'abc123+dirty'
    assert (tmp_path / 'diffs' / f'{env["diff_sha256"]}.diff').read_bytes() == b'diff --git a/m.py b/m.py\n'


def test_a_figure_whose_drawing_fails_leaves_the_old_picture(tmp_path):
    matplotlib = pytest.importorskip('matplotlib')
    matplotlib.use('Agg')
    from matplotlib.figure import Figure
    _util.save_figure(Figure(), tmp_path / 'x.png')
    before = (tmp_path / 'x.png').read_bytes()

    class Broken(Figure):
        def savefig(self, f, **kwargs):
            f.write(b'\x89PNG partial')
            raise RuntimeError('killed mid-draw (simulated)')
    with pytest.raises(RuntimeError, match='simulated'):
        _util.save_figure(Broken(), tmp_path / 'x.png')
    assert (tmp_path / 'x.png').read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ['x.png']


def test_gflops_is_twice_the_package_count_and_keeps_the_training_mode():
    import timm
    import timm_odevit  # noqa: F401
    from tools.card_extras import gmacs
    model = timm.create_model('vit_tiny_cifar_params_matched').train()
    flops = _util.gflops(model)
    assert model.training  # as it came in (gmacs leaves it in eval mode)
    assert flops == pytest.approx(2 * gmacs(model)) and not model.training


def test_teacher_choice_names_the_machine_of_the_compared_epochs_or_refuses():
    import teacher_choice
    timed = {'epoch_hardware': {'0': 'cpu, 1 threads', '1': 'cpu, 2 threads'}, 'hardware': 'cpu, 1 threads / cpu, 2 threads'}
    assert teacher_choice._hardware(timed, 1) == 'cpu, 1 threads'  # epoch 0 only: not the resumed epochs' machine
    assert teacher_choice._hardware(timed, 2) == 'cpu, 1 threads / cpu, 2 threads'
    with pytest.raises(SystemExit, match='no per-epoch machine'):
        teacher_choice._hardware({'hardware': 'cpu, 2 threads'}, 1)  # a record from before epoch_hardware


RECORDED = ('machine', 'commit', 'date', 'command')
DIFFS_KEPT_SINCE = '2026-12-06'  # issue 62: the 12 files measured earlier on a dirty checkout record '+dirty' alone


@pytest.mark.parametrize('path', sorted((ROOT / 'bench' / 'results').glob('*.json')), ids=lambda p: p.name)
def test_every_committed_result_and_each_of_its_rows_records_where_and_how_it_was_measured(path):
    """Issue 45: machine, commit, date and command for the file's last command and for every row (rows from older
    commands keep their own; a row without one is re-run or removed, never back-filled)."""
    data = json.loads(path.read_text())
    for where, env in [('file', data.get('environment'))] + [(f'row {i}', r.get('environment'))
                                                            for i, r in enumerate(_util._rows(data))]:
        assert isinstance(env, dict) and all(env.get(k) for k in RECORDED), f'{path.name} {where}: {env}'
        if '+dirty' in env['commit'] and env['date'] >= DIFFS_KEPT_SINCE:  # a dirty commit comes with its diff
            diff = ROOT / env.get('diff', 'no diff recorded')
            assert diff.is_file() and hashlib.sha256(diff.read_bytes()).hexdigest() == env['diff_sha256'], \
                f'{path.name} {where}: {env["commit"]} without its diff'
