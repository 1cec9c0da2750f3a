"""tools.holdout_split (the held-out split tool): every image in exactly one of train/val, refusals instead of leaks."""
import json
import os
import pathlib

import pytest

from tools.holdout_split import main, make_holdout_split


@pytest.fixture
def src(tmp_path):
    """A fake ImageFolder: 3 classes x 6 images in train, one test class."""
    root = tmp_path / 'src'
    for c in ('cat', 'dog', 'frog'):
        (root / 'train' / c).mkdir(parents=True)
        for i in range(6):
            (root / 'train' / c / f'{c}{i}.png').write_bytes(b'png')
        (root / 'train' / c / 'notes.txt').write_text('not an image')
    (root / 'test' / 'cat').mkdir(parents=True)
    return root


def _images(dst, split):
    return {(c, f) for c in os.listdir(dst / split) for f in os.listdir(dst / split / c)}


def _check_split(dst, val_per_class, counts):
    train, val = _images(dst, 'train'), _images(dst, 'val')
    assert not train & val  # no image in both
    assert len(train) + len(val) == 18 and len(val) == 3 * val_per_class
    assert counts == {'train': len(train), 'val': len(val), 'classes': 3}
    assert all(os.path.islink(dst / s / c / f) for s, files in (('train', train), ('val', val)) for c, f in files)


def test_split_has_disjoint_train_and_val(src, tmp_path):
    dst = tmp_path / 'holdout'
    counts = make_holdout_split(src, dst, val_per_class=2, seed=0)
    _check_split(dst, 2, counts)
    assert (dst / 'test').is_symlink() and json.loads((dst / 'holdout.json').read_text())['seed'] == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith('.')] == []  # no temporary folders left


def test_same_settings_rebuild_other_settings_are_refused(src, tmp_path):
    dst = tmp_path / 'holdout'
    make_holdout_split(src, dst, val_per_class=2, seed=0)
    val = _images(dst, 'val')
    _check_split(dst, 2, make_holdout_split(src, dst, val_per_class=2, seed=0))
    assert _images(dst, 'val') == val
    with pytest.raises(FileExistsError, match=r'other settings \(seed 0 -> 1\); delete it or choose another --dst'):
        make_holdout_split(src, dst, val_per_class=2, seed=1)
    with pytest.raises(FileExistsError, match=r'val_per_class 2 -> 3'):
        make_holdout_split(src, dst, val_per_class=3, seed=0)
    _check_split(dst, 2, {'train': 12, 'val': 6, 'classes': 3})  # untouched by the refusals


def test_foreign_non_empty_destination_is_refused(src, tmp_path):
    dst = tmp_path / 'mine'
    (dst / 'train' / 'cat').mkdir(parents=True)
    (dst / 'train' / 'cat' / 'old.png').write_bytes(b'png')
    with pytest.raises(FileExistsError, match='not a split made by this tool'):
        make_holdout_split(src, dst, val_per_class=2)
    (tmp_path / 'empty').mkdir()
    _check_split(tmp_path / 'empty', 2, make_holdout_split(src, tmp_path / 'empty', val_per_class=2))


@pytest.mark.parametrize('where', ['same', 'inside', 'parent'])
def test_destination_overlapping_the_source_is_refused(src, where):
    dst = {'same': src, 'inside': src / 'holdout', 'parent': src.parent}[where]
    with pytest.raises(ValueError, match='must be outside --src'):
        make_holdout_split(src, dst, val_per_class=2)
    assert sorted(os.listdir(src / 'train' / 'cat')) == sorted([f'cat{i}.png' for i in range(6)] + ['notes.txt'])


@pytest.mark.parametrize('n, error, words', [
    (0, ValueError, 'val_per_class must be >= 1'), (-1, ValueError, 'val_per_class must be >= 1'),
    (6, ValueError, "class 'cat' has 6 images, cannot hold out 6.*below 6"),
    (True, TypeError, 'val_per_class must be an integer'), (2.5, TypeError, 'val_per_class must be an integer')])
def test_bad_val_per_class(src, tmp_path, n, error, words):
    with pytest.raises(error, match=words):
        make_holdout_split(src, tmp_path / 'holdout', val_per_class=n)
    assert os.listdir(tmp_path) == ['src']  # nothing created


def test_failure_leaves_no_partial_split(src, tmp_path, monkeypatch):
    calls = []

    def failing_symlink(target, link):
        calls.append(link)
        if len(calls) == 5:
            raise OSError('disk full')
        os.link(src / 'train' / 'cat' / 'cat0.png', link)

    monkeypatch.setattr('tools.holdout_split.os.symlink', failing_symlink)
    with pytest.raises(OSError, match='disk full'):
        make_holdout_split(src, tmp_path / 'holdout', val_per_class=2)
    assert os.listdir(tmp_path) == ['src']


def test_command_line(src, tmp_path, capsys):
    dst = tmp_path / 'holdout'
    main(['--src', str(src), '--dst', str(dst), '--val-per-class', '1', '--seed', '3'])
    assert '15 train and 3 val images in 3 classes' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(['--src', str(src), '--dst', str(dst), '--val-per-class', '2'])
    assert 'other settings (val_per_class 1 -> 2, seed 3 -> 0)' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(['--src', str(src), '--dst', str(src), '--val-per-class', '0'])
    assert 'val_per_class must be >= 1' in capsys.readouterr().err


def test_images_in_nested_folders_are_kept(src, tmp_path):
    nested = src / 'train' / 'cat' / 'night'
    nested.mkdir()
    for i in range(4):
        (nested / f'n{i}.png').write_bytes(b'png')
    dst = tmp_path / 'holdout'
    counts = make_holdout_split(src, dst, val_per_class=2, seed=0)
    assert counts['train'] + counts['val'] == 22
    kept = {p.relative_to(dst / s / 'cat') for s in ('train', 'val') for p in (dst / s / 'cat').rglob('n*.png')}
    assert kept == {pathlib.Path('night') / f'n{i}.png' for i in range(4)}


def test_only_the_images_timm_reads_are_split_and_no_class_is_dropped(src, tmp_path):
    """timm's ImageFolder reader reads .png / .jpg / .jpeg only: other files are neither counted nor linked, and a
    class folder with none of them (which would vanish from the split and shift every label after it) is refused."""
    for i in range(6):
        (src / 'train' / 'dog' / f'extra{i}.bmp').write_bytes(b'bmp')
    counts = make_holdout_split(src, tmp_path / 'holdout', val_per_class=2)
    assert counts == {'train': 12, 'val': 6, 'classes': 3}
    assert not list((tmp_path / 'holdout').rglob('*.bmp'))
    (src / 'train' / 'bird').mkdir()
    for i in range(6):
        (src / 'train' / 'bird' / f'b{i}.webp').write_bytes(b'webp')
    with pytest.raises(ValueError, match=r"\['bird'\] .* hold no image that timm reads .*would drop them"):
        make_holdout_split(src, tmp_path / 'other', val_per_class=2)
