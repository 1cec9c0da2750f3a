"""bench/_util.py: every result row records where and how it was measured, when it is measured."""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'bench'))
import _util  # noqa: E402  (bench/ is a folder of scripts, not a package)


def test_new_and_changed_rows_get_the_environment_and_old_rows_are_not_back_filled(tmp_path, monkeypatch):
    monkeypatch.setattr(_util, 'RESULTS', tmp_path)
    monkeypatch.setattr(_util.sys, 'argv', ['bench/x.py', '--seed', '1'])
    (tmp_path / 'x.json').write_text(json.dumps({'runs': {'a': {'top1': 50.0}, 'b': {'top1': 40.0}},
                                                 'rows': [{'v': 1}]}))
    _util.write_result('x', {'runs': {'a': {'top1': 50.0}, 'b': {'top1': 41.0}, 'c': {'top1': 30.0}},
                             'rows': [{'v': 1}, {'v': 2}], 'note': 'n'})
    out = json.loads((tmp_path / 'x.json').read_text())
    env = out['environment']
    assert {'machine', 'cpu_cores', 'torch', 'commit', 'date', 'command'} <= set(env)
    assert env['command'].endswith('bench/x.py --seed 1')
    assert 'environment' not in out['runs']['a'] and 'environment' not in out['rows'][0]  # unchanged: not back-filled
    assert out['runs']['b']['environment'] == out['runs']['c']['environment'] == out['rows'][1]['environment'] == env
    monkeypatch.setattr(_util.sys, 'argv', ['bench/x.py', '--seed', '2'])
    _util.write_result('x', {'runs': out['runs']})  # rows read back keep the record of the run that measured them
    assert json.loads((tmp_path / 'x.json').read_text())['runs']['c']['environment']['command'].endswith('--seed 1')
