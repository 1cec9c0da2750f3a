import pytest

from timm_odevit.tasks import align_time_points, map_teacher_to_student, teacher_step_distances
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
    with pytest.raises(ValueError, match='cannot map 12 teacher blocks onto 6 .*align_time_points'):
        map_teacher_to_student(12, 6)


def test_a_shallower_teacher_aligns_every_block():
    assert align_time_points(4, 10) == ([0, 1, 2, 3], map_teacher_to_student(4, 10))
    assert align_time_points(4, 16, 'arclength', [1, 1, 2, 4]) == ([0, 1, 2, 3], [1, 3, 7, 15])


def test_a_deeper_teacher_gives_every_time_point_its_nearest_block():
    assert align_time_points(12, 6) == ([1, 3, 5, 7, 9, 11], list(range(6)))  # t_i = i/6 = block 2i / 12
    # t = 0.25, 0.5, 0.75, 1 between blocks 1/6 and 2/6, 3/6, 4/6 and 5/6, 6/6: ties go to the deeper block
    assert align_time_points(6, 4) == ([1, 2, 4, 5], [0, 1, 2, 3])
    # arclength: blocks 1-5 cover fractions 0.1 … 0.5 of the path, block 6 the rest: t = 0.5 is block 5
    assert align_time_points(6, 2, 'arclength', [1, 1, 1, 1, 1, 5]) == ([4, 5], [0, 1])
    # nearest blocks 3, 5, 6, 6 are made strictly increasing: 3, 4, 5, 6
    assert align_time_points(6, 4, 'arclength', [1, 1, 1, 1, 1, 5]) == ([2, 3, 4, 5], [0, 1, 2, 3])
    assert align_time_points(3, 1) == ([2], [0])


@pytest.mark.parametrize('mapping', ['uniform', 'arclength', 'softmax'])
def test_alignment_pairs_increase_and_end_at_both_last_points(mapping):
    for L, N in ((3, 3), (5, 7), (7, 5), (12, 3), (6, 1)):
        blocks, points = align_time_points(L, N, mapping, distances=[1.0] * (L - 1) + [50.0])
        assert len(blocks) == len(points) == min(L, N) and (blocks[-1], points[-1]) == (L - 1, N - 1)
        assert all(b > a for seq in (blocks, points) for a, b in zip(seq, seq[1:]))


def test_alignment_refuses_bad_grids_and_distances():
    with pytest.raises(ValueError, match='num_student must be an integer >= 1, got 0'):
        align_time_points(4, 0)
    with pytest.raises(ValueError, match="mapping 'arclength' needs 6 measured teacher step distances"):
        align_time_points(6, 3, 'arclength')


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
