"""Per-group data transforms: rotation, blur, backdoor patch, noise, feature shift and label
permutation, alone and through apply_group."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from distfl.config import GroupSpec
from distfl.data.transforms import (
    apply_group,
    backdoor_patch,
    feature_shift,
    gaussian_blur,
    gaussian_noise,
    label_permutation,
    patch_colours,
    rotate,
    rotate_bilinear,
)


def images(n=4, c=1, h=6, w=6, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, c, h, w)).astype(np.float32)


def one_pixel(h, w, row, col) -> np.ndarray:
    x = np.zeros((1, 1, h, w), np.float32)
    x[0, 0, row, col] = 1.0
    return x


def blob(size=21, sigma=2.5) -> np.ndarray:
    """A centred, rotationally symmetric Gaussian blob [1, 1, size, size]."""
    t = np.arange(size) - (size - 1) / 2
    return np.exp(-(t[:, None] ** 2 + t[None, :] ** 2) / (2 * sigma**2))[None, None].astype(
        np.float32
    )


def total_variation(x: np.ndarray) -> float:
    return float(np.abs(np.diff(x, axis=-1)).sum() + np.abs(np.diff(x, axis=-2)).sum())


# rotation


@pytest.mark.parametrize("size", [4, 5])
def test_rotate_90_is_counter_clockwise(size):
    """The top-right pixel goes to the top-left, the top-left to the bottom-left."""
    np.testing.assert_array_equal(
        rotate(one_pixel(size, size, 0, size - 1), 90), one_pixel(size, size, 0, 0)
    )
    np.testing.assert_array_equal(
        rotate(one_pixel(size, size, 0, 0), 90), one_pixel(size, size, size - 1, 0)
    )
    np.testing.assert_array_equal(
        rotate(one_pixel(size, size, 0, 0), -90), one_pixel(size, size, 0, size - 1)
    )


def test_rotate_multiples_of_90_are_exact():
    x = images(c=3)
    np.testing.assert_array_equal(rotate(rotate(x, 180), 180), x)
    y = x
    for _ in range(4):
        y = rotate(y, 90)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(rotate(x, -90), rotate(x, 270))
    np.testing.assert_array_equal(rotate(x, 450), rotate(x, 90))
    np.testing.assert_array_equal(rotate(x, 180), x[:, :, ::-1, ::-1])
    assert rotate(x, 90).dtype == np.float32


@pytest.mark.parametrize("size", [5, 6])
def test_bilinear_path_matches_rot90_at_90(size):
    x = images(n=3, c=2, h=size, w=size)
    for degrees in (90, 180, 270, -90):
        np.testing.assert_allclose(rotate_bilinear(x, degrees), rotate(x, degrees), atol=1e-6)


def test_bilinear_rotation_of_a_symmetric_blob():
    x = blob()
    for degrees in (45, 30, -60):
        y = rotate(x, degrees)
        assert y.shape == x.shape and y.dtype == np.float32
        assert y.sum() == pytest.approx(x.sum(), rel=0.01)
        np.testing.assert_allclose(y, x, atol=0.04)  # bilinear smoothing at the peak


def test_bilinear_rotation_direction_at_45():
    """A pixel right of the centre moves up and right at 45° counter-clockwise (row 0 on top)."""
    x = one_pixel(9, 9, 4, 8)  # centre (4, 4); 4 pixels to the right
    y = rotate(x, 45)[0, 0]
    row, col = np.unravel_index(np.argmax(y), y.shape)
    r = 4 / math.sqrt(2)
    assert abs(row - (4 - r)) < 1 and abs(col - (4 + r)) < 1


def test_rotate_non_square_images():
    x = images(h=4, w=6)
    with pytest.raises(ValueError, match="shape"):
        rotate(x, 90)
    np.testing.assert_array_equal(rotate(x, 180), x[:, :, ::-1, ::-1])
    assert rotate(x, 30).shape == x.shape


def test_rotate_tabular():
    x = np.array([[1.0, 0.0, 5.0], [0.0, 1.0, -2.0], [3.0, 4.0, 7.0]], np.float32)
    np.testing.assert_array_equal(
        rotate(x, 90), np.array([[0, 1, 5], [-1, 0, -2], [-4, 3, 7]], np.float32)
    )
    t = math.radians(30)
    expected = x.astype(np.float64).copy()
    expected[:, 0] = math.cos(t) * x[:, 0] - math.sin(t) * x[:, 1]
    expected[:, 1] = math.sin(t) * x[:, 0] + math.cos(t) * x[:, 1]
    np.testing.assert_allclose(rotate(x, 30), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        np.linalg.norm(rotate(x, 30), axis=1), np.linalg.norm(x, axis=1), rtol=1e-6
    )
    with pytest.raises(ValueError, match="2 features"):
        rotate(np.ones((3, 1), np.float32), 30)


# blur


def kernel_1d(size: int) -> np.ndarray:
    sigma = 0.3 * ((size - 1) * 0.5 - 1) + 0.8
    w = np.array([math.exp(-((i - size // 2) ** 2) / (2 * sigma * sigma)) for i in range(size)])
    return w / w.sum()


@pytest.mark.parametrize("size", [3, 5, 7])
def test_blur_of_a_delta_is_the_kernel(size):
    x = np.zeros((1, 2, 11, 11), np.float32)
    x[0, :, 5, 5] = 1.0
    expected = np.zeros_like(x, dtype=np.float64)
    h = size // 2
    expected[0, :, 5 - h : 6 + h, 5 - h : 6 + h] = np.outer(kernel_1d(size), kernel_1d(size))
    y = gaussian_blur(x, size)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, atol=1e-7)


def test_blur_matches_reflect_padded_convolution():
    """Against torch's reflect padding (numpy's 'reflect': the edge pixel is not repeated)."""
    x = images(n=2, c=3, h=8, w=8)
    w = torch.from_numpy(np.outer(kernel_1d(5), kernel_1d(5)))
    padded = torch.nn.functional.pad(torch.from_numpy(x).double(), (2, 2, 2, 2), mode="reflect")
    expected = torch.nn.functional.conv2d(padded, w.expand(3, 1, 5, 5).contiguous(), groups=3)
    np.testing.assert_allclose(gaussian_blur(x, 5), expected.numpy(), atol=1e-6)


def test_blur_keeps_a_constant_image_and_smooths():
    x = np.full((2, 3, 8, 8), 0.37, np.float32)
    for size in (3, 5, 7):
        np.testing.assert_array_equal(gaussian_blur(x, size), x)
    z = images(n=2, c=3, h=12, w=12)
    assert total_variation(gaussian_blur(z, 3)) < total_variation(z)
    assert total_variation(gaussian_blur(z, 5)) < total_variation(gaussian_blur(z, 3))


# backdoor patch


def test_patch_colours_distinct_and_fixed():
    for channels in (1, 3):
        c = patch_colours(10, channels, seed=3)
        assert c.shape == (10, channels) and c.dtype == np.float32
        assert len({tuple(row) for row in c}) == 10
        assert np.all((c > 0) & (c <= 1))
        np.testing.assert_array_equal(c, patch_colours(10, channels, seed=3))
    np.testing.assert_array_equal(
        np.sort(patch_colours(10, 1, seed=0)[:, 0]), (np.arange(1, 11) / 10).astype(np.float32)
    )
    assert not np.array_equal(patch_colours(10, 3, seed=0), patch_colours(10, 3, seed=1))


@pytest.mark.parametrize("channels", [1, 3])
def test_backdoor_patch(channels):
    x = images(n=5, c=channels, h=7, w=7)
    y = np.array([2, 0, 2, 1, 0])
    out = backdoor_patch(x, y, 3, num_classes=4, seed=5)
    colours = patch_colours(4, channels, seed=5)
    for i, label in enumerate(y):
        for ch in range(channels):
            np.testing.assert_array_equal(out[i, ch, :3, :3], np.full((3, 3), colours[label, ch]))
    rest = np.ones((7, 7), bool)
    rest[:3, :3] = False
    np.testing.assert_array_equal(out[:, :, rest], x[:, :, rest])
    np.testing.assert_array_equal(out[0, :, :3, :3], out[2, :, :3, :3])  # same class
    assert not np.array_equal(out[0, :, :3, :3], out[3, :, :3, :3])  # different classes
    assert not np.array_equal(out[1, :, :3, :3], out[3, :, :3, :3])


def test_backdoor_patch_errors():
    with pytest.raises(ValueError, match="fit"):
        backdoor_patch(images(h=4, w=6), np.zeros(4, np.int64), 5, num_classes=2, seed=0)
    with pytest.raises(ValueError, match="patch"):
        backdoor_patch(np.ones((3, 4), np.float32), np.zeros(3, np.int64), 1, num_classes=2, seed=0)


# noise and shift


def test_noise_per_client():
    x = images(n=3, c=2)
    a = gaussian_noise(x, 0.1, seed=4, client=1)
    np.testing.assert_array_equal(a, gaussian_noise(x, 0.1, seed=4, client=1))
    assert not np.array_equal(a, gaussian_noise(x, 0.1, seed=4, client=2))
    assert not np.array_equal(a, gaussian_noise(x, 0.1, seed=5, client=1))
    # the draw of earlier versions, bit for bit
    rng = np.random.default_rng([4, 0x9015E, 1])
    np.testing.assert_array_equal(a, (x + rng.normal(0.0, 0.1, size=x.shape)).astype(np.float32))
    assert a.dtype == np.float32


@pytest.mark.parametrize("shape", [(6, 5), (3, 2, 4, 4)])
def test_feature_shift(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = feature_shift(x, 2.5, seed=1, group=0)
    offset = (out - x).reshape(len(x), -1)
    np.testing.assert_allclose(offset, np.broadcast_to(offset[0], offset.shape), atol=1e-6)
    assert np.linalg.norm(offset[0]) == pytest.approx(2.5, rel=1e-5)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, feature_shift(x, 2.5, seed=1, group=0))
    other = feature_shift(x, 2.5, seed=1, group=1) - x
    assert not np.allclose(other.reshape(len(x), -1)[0], offset[0], atol=1e-3)


def test_shift_is_per_group_not_per_client():
    x = np.zeros((4, 3), np.float32)
    spec = GroupSpec(count=2, alpha=1.0, shift=1.0)
    kw = dict(num_classes=2, seed=0)
    a, _ = apply_group(x, np.zeros(4, np.int64), spec, group=1, client=0, **kw)
    b, _ = apply_group(x, np.zeros(4, np.int64), spec, group=1, client=7, **kw)
    c, _ = apply_group(x, np.zeros(4, np.int64), spec, group=2, client=0, **kw)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c, atol=1e-3)


# label permutation


def test_label_permutation_is_a_derangement():
    for num_classes in (2, 3, 10, 62):
        for seed, group in [(0, 0), (0, 1), (7, 3)]:
            perm = label_permutation(num_classes, seed=seed, group=group)
            np.testing.assert_array_equal(np.sort(perm), np.arange(num_classes))
            assert not np.any(perm == np.arange(num_classes))
            np.testing.assert_array_equal(
                perm, label_permutation(num_classes, seed=seed, group=group)
            )


# apply_group


def full_spec(**kw) -> GroupSpec:
    fields = dict(count=2, alpha=1.0, rotation=30.0, blur=3, patch=2, noise=0.05, shift=0.5)
    return GroupSpec(**{**fields, "permute_labels": True, **kw})


def test_apply_group_all_off_returns_equal_copies():
    x, y = images(n=4, c=3), np.array([0, 1, 2, 1])
    spec = GroupSpec(count=2, alpha=1.0)
    out_x, out_y = apply_group(x, y, spec, num_classes=3, seed=0, group=0, client=0)
    np.testing.assert_array_equal(out_x, x)
    np.testing.assert_array_equal(out_y, y)
    assert out_x.dtype == np.float32 and out_y.dtype == np.int64
    assert not np.shares_memory(out_x, x) and not np.shares_memory(out_y, y)


@pytest.mark.parametrize(
    "spec",
    [full_spec(), full_spec(rotation=90.0, blur=0), full_spec(rotation=0.0, patch=0, blur=5)],
)
def test_apply_group_leaves_its_inputs_and_is_deterministic(spec):
    x, y = images(n=6, c=3, h=8, w=8), np.array([0, 1, 2, 3, 1, 0])
    x0, y0 = x.copy(), y.copy()
    kw = dict(num_classes=4, seed=3, group=1, client=2)
    a = apply_group(x, y, spec, **kw)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
    b = apply_group(x, y, spec, **kw)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0].dtype == np.float32 and a[0].shape == x.shape and a[1].dtype == np.int64


def test_apply_group_order():
    """Rotation, blur, patch, noise, shift, then labels: the patch is a sharp square after
    rotation and blur, and its colour encodes the class before the permutation."""
    x, y = images(n=6, c=3, h=8, w=8), np.array([0, 1, 2, 3, 1, 0])
    spec = full_spec(noise=0.0, shift=0.0)
    out_x, out_y = apply_group(x, y, spec, num_classes=4, seed=3, group=1, client=2)
    np.testing.assert_array_equal(out_y, label_permutation(4, seed=3, group=1)[y])
    colours = patch_colours(4, 3, seed=3)
    np.testing.assert_array_equal(
        out_x[:, :, :2, :2], np.broadcast_to(colours[y][:, :, None, None], (6, 3, 2, 2))
    )
    expected = backdoor_patch(gaussian_blur(rotate(x, 30.0), 3), y, 2, num_classes=4, seed=3)
    np.testing.assert_array_equal(out_x, expected)
    noisy = full_spec(shift=0.0)
    out_noisy, _ = apply_group(x, y, noisy, num_classes=4, seed=3, group=1, client=2)
    np.testing.assert_array_equal(out_noisy, gaussian_noise(expected, 0.05, seed=3, client=2))


def test_apply_group_same_patch_in_every_group():
    x, y = images(n=3, c=1), np.array([0, 1, 0])
    spec = GroupSpec(count=2, alpha=1.0, patch=2)
    a, _ = apply_group(x, y, spec, num_classes=2, seed=0, group=0, client=0)
    b, _ = apply_group(x, y, spec, num_classes=2, seed=0, group=3, client=5)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("field,value,name", [("blur", 3, "blur"), ("patch", 1, "patch")])
def test_image_transforms_reject_tabular_data(field, value, name):
    x, y = np.ones((4, 5), np.float32), np.zeros(4, np.int64)
    spec = GroupSpec(count=1, alpha=1.0, **{field: value})
    with pytest.raises(ValueError, match=name):
        apply_group(x, y, spec, num_classes=2, seed=0, group=0, client=0)


def test_apply_group_tabular():
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    y = np.array([0, 1, 1, 0, 1])
    spec = GroupSpec(count=1, alpha=1.0, rotation=90.0, shift=1.0, permute_labels=True)
    out_x, out_y = apply_group(x, y, spec, num_classes=2, seed=0, group=0, client=0)
    expected = feature_shift(rotate(x, 90.0), 1.0, seed=0, group=0)
    np.testing.assert_array_equal(out_x, expected)
    np.testing.assert_array_equal(out_y, 1 - y)
