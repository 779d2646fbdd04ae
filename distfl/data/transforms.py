"""Per-group transforms of a client's data, deterministic per (seed, group, client).

Features are float arrays, either images ``[n, C, H, W]`` or tabular data ``[n, d]``;
labels are int64 ``[n]``. :func:`apply_group` applies a group's transforms in this order
(the order of the fields of :class:`~distfl.config.GroupSpec`):

1. ``rotation``: images rotate by the angle (degrees, counter-clockwise as seen with row 0
   at the top) about their centre; multiples of 90° are exact (:func:`numpy.rot90`), other
   angles use bilinear interpolation with zeros outside the image. Tabular data rotates
   in the plane of its first two coordinates (a Givens rotation). The rotated-MNIST/CIFAR
   scenario of CFL and IFCA.
2. ``blur``: Gaussian blur of each channel with a kernel of that (odd) size and
   torchvision's default σ for it, with reflect padding (numpy's ``mode="reflect"``: the
   edge pixel is not repeated; scipy calls it ``"mirror"``). Images only.
3. ``patch``: EMD-CFL's backdoor: the top-left ``patch``×``patch`` pixels of every image
   take a colour that encodes the sample's class (:func:`patch_colours`, the same table
   for every group). It comes after rotation and blur so the patch stays a sharp square in
   the corner, and before the label permutation so it encodes the original class.
   Images only.
4. ``noise``: Gaussian noise of standard deviation σ added to every feature (the FedGWC
   paper's "Noise" visual domain, Table 4), drawn per client from (seed, client); it
   lands on the patch as on the rest of the image.
5. ``shift``: a fixed offset of norm ``shift`` added to every sample, in a direction drawn
   per (seed, group) — a feature shift, for tabular data mainly.
6. ``permute_labels``: the group's labels pass through one fixed permutation drawn from
   (seed, group) — a concept shift, the classic clustered-FL scenario (CFL, IFCA).

Each transform is a function of its own, returning a new float32 array.
"""

from __future__ import annotations

import numpy as np

from distfl.config import GroupSpec


def _check_image(x: np.ndarray, transform: str) -> None:
    if x.ndim != 4:
        raise ValueError(
            f"{transform} applies to images [n, C, H, W], not features of shape {x.shape[1:]}"
        )


def rotate(x: np.ndarray, degrees: float) -> np.ndarray:
    """Rotate images ``[n, C, H, W]`` (or the first two coordinates of ``[n, d]``) by
    ``degrees`` counter-clockwise; multiples of 90° are exact."""
    quarters, rest = divmod(float(degrees), 90.0)
    if x.ndim == 2:
        if x.shape[1] < 2:
            raise ValueError(f"rotation needs at least 2 features, not {x.shape[1]}")
        if rest == 0:
            c, s = ((1, 0), (0, 1), (-1, 0), (0, -1))[int(quarters) % 4]
        else:
            c, s = np.cos(np.deg2rad(degrees)), np.sin(np.deg2rad(degrees))
        out = x.astype(np.float64)
        a, b = out[:, 0].copy(), out[:, 1].copy()
        out[:, 0], out[:, 1] = c * a - s * b, s * a + c * b
        return out.astype(np.float32)
    _check_image(x, "rotation")
    if rest != 0:
        return rotate_bilinear(x, degrees)
    if int(quarters) % 2 and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"a rotation by {degrees}° changes the shape of {x.shape[-2:]} images")
    return np.rot90(x, int(quarters) % 4, axes=(-2, -1)).astype(np.float32)


def rotate_bilinear(x: np.ndarray, degrees: float) -> np.ndarray:
    """Rotate images ``[n, C, H, W]`` counter-clockwise about their centre, with bilinear
    interpolation and zeros where the rotated image leaves the frame."""
    _check_image(x, "rotation")
    from scipy import ndimage  # imported by rotated and blurred groups only

    out = ndimage.rotate(
        x.astype(np.float32), degrees, axes=(-2, -1), reshape=False, order=1, mode="constant"
    )
    return out.astype(np.float32, copy=False)


def gaussian_kernel(size: int) -> np.ndarray:
    """The normalised 1-D Gaussian kernel of an odd ``size``, with torchvision's default
    σ = 0.3·((size - 1)/2 - 1) + 0.8."""
    sigma = 0.3 * ((size - 1) * 0.5 - 1) + 0.8
    t = np.arange(size) - (size - 1) / 2
    w = np.exp(-0.5 * (t / sigma) ** 2)
    return w / w.sum()


def gaussian_blur(x: np.ndarray, size: int) -> np.ndarray:
    """Blur each channel of images ``[n, C, H, W]`` with a separable Gaussian kernel of
    ``size``, reflect padding (numpy's ``"reflect"``, scipy's ``"mirror"``)."""
    _check_image(x, "blur")
    w = gaussian_kernel(size)
    from scipy import ndimage

    out = ndimage.correlate1d(x.astype(np.float32), w, axis=-1, mode="mirror")
    return ndimage.correlate1d(out, w, axis=-2, mode="mirror")


def patch_colours(num_classes: int, channels: int, *, seed: int) -> np.ndarray:
    """``[num_classes, channels]`` colours in (0, 1], one per class, drawn from ``seed``.

    Each channel takes the intensities (1..num_classes)/num_classes in its own random order,
    so distinct classes always get distinct colours."""
    rng = np.random.default_rng([seed, 0xBAC0D])
    ranks = np.stack([rng.permutation(num_classes) for _ in range(channels)], axis=1)
    return ((ranks + 1) / num_classes).astype(np.float32)


def backdoor_patch(
    x: np.ndarray, y: np.ndarray, size: int, *, num_classes: int, seed: int
) -> np.ndarray:
    """Images ``[n, C, H, W]`` with their top-left ``size``×``size`` pixels set to the
    colour of their class ``y`` (:func:`patch_colours`)."""
    _check_image(x, "patch")
    if size > min(x.shape[-2:]):
        raise ValueError(f"a {size}×{size} patch does not fit in {x.shape[-2:]} images")
    out = x.astype(np.float32)  # a copy
    colours = patch_colours(num_classes, x.shape[1], seed=seed)
    out[:, :, :size, :size] = colours[y][:, :, None, None]
    return out


def gaussian_noise(x: np.ndarray, std: float, *, seed: int, client: int) -> np.ndarray:
    """``x`` plus Gaussian noise of standard deviation ``std``, drawn per (seed, client)."""
    rng = np.random.default_rng([seed, 0x9015E, client])
    return (x + rng.normal(0.0, std, size=x.shape)).astype(np.float32)


def shift_direction(shape: tuple[int, ...], *, seed: int, group: int) -> np.ndarray:
    """A unit-norm array of ``shape``, drawn per (seed, group)."""
    u = np.random.default_rng([seed, 0x5A1F7, group]).standard_normal(shape)
    return u / np.linalg.norm(u)


def feature_shift(x: np.ndarray, norm: float, *, seed: int, group: int) -> np.ndarray:
    """Every sample of ``x`` plus the same offset of norm ``norm`` (:func:`shift_direction`)."""
    return (x + norm * shift_direction(x.shape[1:], seed=seed, group=group)).astype(np.float32)


def label_permutation(num_classes: int, *, seed: int, group: int) -> np.ndarray:
    """A permutation of the classes that moves every class (a derangement)."""
    rng = np.random.default_rng([seed, 0x1ABE1, group])
    while True:
        perm = rng.permutation(num_classes)
        if num_classes < 2 or not np.any(perm == np.arange(num_classes)):
            return perm


def apply_group(
    x: np.ndarray,
    y: np.ndarray,
    spec: GroupSpec,
    *,
    num_classes: int,
    seed: int,
    group: int,
    client: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The client's features (float32) and labels (int64) after its group's transforms,
    in the order of the module docstring (new arrays; the inputs are left as they are)."""
    if spec.rotation % 360 != 0:
        x = rotate(x, spec.rotation)
    if spec.blur > 0:
        x = gaussian_blur(x, spec.blur)
    if spec.patch > 0:
        x = backdoor_patch(x, y, spec.patch, num_classes=num_classes, seed=seed)
    if spec.noise > 0:
        x = gaussian_noise(x, spec.noise, seed=seed, client=client)
    if spec.shift > 0:
        x = feature_shift(x, spec.shift, seed=seed, group=group)
    if spec.permute_labels:
        y = label_permutation(num_classes, seed=seed, group=group)[y]
    return x.astype(np.float32), y.astype(np.int64)
