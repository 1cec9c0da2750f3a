import pytest

from timm_odevit.tasks import map_teacher_to_student, teacher_step_distances
import torch


def test_uniform_mapping():
    assert map_teacher_to_student(12, 12) == list(range(12))
    assert map_teacher_to_student(12, 36) == [2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35]
    assert map_teacher_to_student(4, 10) == [2, 4, 7, 9]


def test_arclength_follows_the_measured_distances():
    # the last block moves 4x as far as the first: it gets the largest share of the time axis
    idx = map_teacher_to_student(4, 16, 'arclength', distances=[1, 1, 2, 4])
    assert idx == [1, 3, 7, 15]


def test_softmax_mapping_is_the_reference_rule():
    d = [30., 20., 10., 10., 10., 10., 10., 10., 10., 12., 15., 40.]
    idx = map_teacher_to_student(12, 36, 'softmax', distances=d, temperature=30.)
    w = torch.softmax(torch.tensor(d, dtype=torch.float64) / 30., 0)
    c = torch.cumsum(torch.round(w * 36), 0).long() - 1
    assert idx[:-1] == c.tolist()[:-1] and idx[-1] == 35
    assert all(b > a for a, b in zip(idx, idx[1:]))


@pytest.mark.parametrize('mapping', ['uniform', 'arclength', 'softmax'])
def test_indices_always_increase_and_end_at_the_last_point(mapping):
    for L, N in ((3, 3), (5, 7), (12, 24)):
        d = [1.0] * (L - 1) + [50.0]
        idx = map_teacher_to_student(L, N, mapping, distances=d)
        assert len(idx) == L and idx[-1] == N - 1 and all(b > a for a, b in zip(idx, idx[1:]))


def test_more_teacher_blocks_than_student_points():
    with pytest.raises(ValueError, match='cannot map 12 teacher blocks onto 6'):
        map_teacher_to_student(12, 6)


def test_bad_mapping_arguments():
    with pytest.raises(ValueError, match='Unknown mapping'):
        map_teacher_to_student(4, 8, 'linear')
    with pytest.raises(ValueError, match='distances'):
        map_teacher_to_student(4, 8, 'arclength')


def test_teacher_step_distances():
    h = [torch.zeros(2, 3), torch.ones(2, 3), 3 * torch.ones(2, 3)]
    d = teacher_step_distances(h)
    assert d[1:] == pytest.approx([3 ** 0.5, 2 * 3 ** 0.5]) and d[0] == pytest.approx(1.5 * 3 ** 0.5)


@pytest.mark.parametrize('temperature', [0., -30., float('nan'), float('inf'), None])
def test_bad_softmax_temperature(temperature):
    with pytest.raises(ValueError, match=rf'mapping temperature must be a finite number > 0.*got {temperature!r}'):
        map_teacher_to_student(4, 8, 'softmax', distances=[1., 1., 1., 1.], temperature=temperature)


@pytest.mark.parametrize('mapping, distances', [
    ('softmax', [1., float('nan'), 1., 1.]), ('arclength', [1., float('inf'), 1., 1.]),
    ('arclength', [1., -2., 1., 1.]), ('arclength', [0., 0., 0., 0.])])
def test_bad_measured_distances(mapping, distances):
    with pytest.raises(ValueError, match=rf"mapping '{mapping}' needs finite, non-negative teacher step distances"
                                         r".*mapping='uniform'"):
        map_teacher_to_student(4, 8, mapping, distances=distances)
