"""tools.ship_data: images cross pixel for pixel in size-capped parts, and a missing or damaged part is refused."""
import json

import numpy as np
import pytest
from PIL import Image

from tools import ship_data


def _tree(root, n=4):
    rng = np.random.default_rng(0)
    for split in ('train', 'val'):
        for cls in ('cat', 'dog'):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / split / cls / f'{i}.png')
    return root


def test_pack_and_unpack_round_trip_pixel_for_pixel(tmp_path):
    src = _tree(tmp_path / 'src')
    m = ship_data.pack(tmp_path / 'ship', {'holdout': src}, max_mb=0.02, workers=1)  # ~4 kB per noise image: parts
    assert m['images'] == 16 and len(m['parts']) > 1
    parts = [tmp_path / 'ship' / p for p in m['parts']]
    assert all(p.stat().st_size <= 0.02e6 for p in parts)  # the cap holds for the whole file, names and offsets too
    assert json.loads((tmp_path / 'ship' / 'manifest.json').read_text()) == m
    ship_data.unpack(tmp_path / 'dst', m, parts, workers=1)
    for f in src.rglob('*.png'):
        out = tmp_path / 'dst' / 'holdout' / f.relative_to(src)
        assert np.array_equal(np.asarray(Image.open(out)), np.asarray(Image.open(f)))
    with pytest.raises(SystemExit, match='exists'):
        ship_data.unpack(tmp_path / 'dst', m, parts, workers=1)


def test_a_missing_or_damaged_part_is_refused_and_leaves_nothing(tmp_path):
    m = ship_data.pack(tmp_path / 'ship', {'x': _tree(tmp_path / 'src')}, max_mb=0.02, workers=1)
    parts = [tmp_path / 'ship' / p for p in m['parts']]
    with pytest.raises(SystemExit, match='missing, repeated or damaged'):
        ship_data.unpack(tmp_path / 'dst', m, parts[:-1], workers=1)
    assert not (tmp_path / 'dst').exists() and not list(tmp_path.glob('.dst*'))
    with pytest.raises(SystemExit, match='missing, repeated or damaged'):
        ship_data.unpack(tmp_path / 'dst', dict(m, digest='0' * 64), parts, workers=1)


def test_names_that_would_overwrite_each_other_are_refused(tmp_path):
    src = _tree(tmp_path / 'src', n=1)
    Image.open(src / 'train' / 'cat' / '0.png').save(src / 'train' / 'cat' / '0.jpg')  # same path without suffix
    with pytest.raises(SystemExit, match='more than once'):
        ship_data.pack(tmp_path / 'ship', {'x': src}, max_mb=1, workers=1)
    (src / 'train' / 'cat' / '0.jpg').unlink()
    m = ship_data.pack(tmp_path / 'ship', {'x': src}, max_mb=1, workers=1)
    part = tmp_path / 'ship' / m['parts'][0]
    with pytest.raises(SystemExit, match='more than once'):  # a part given twice
        ship_data.unpack(tmp_path / 'dst', m, [part, part], workers=1)
    part.write_bytes(part.read_bytes()[:100])  # a damaged part
    with pytest.raises(SystemExit, match='cannot unpack'):
        ship_data.unpack(tmp_path / 'dst', m, [part], workers=1)
    assert not (tmp_path / 'dst').exists() and not list(tmp_path.glob('.dst*'))
