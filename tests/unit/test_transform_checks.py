"""Transforms the data cannot take are refused before any collective (ConfigError, exit 2)."""

from __future__ import annotations

import numpy as np
import pytest

from distfl.config import GroupSpec
from distfl.data import check_transforms
from distfl.data.dataset import Dataset
from distfl.errors import ConfigError


def dataset(shape: tuple[int, ...]) -> Dataset:
    return Dataset("d", np.zeros((4, *shape), np.float32), np.zeros(4, np.int64), 2)


@pytest.mark.parametrize(
    "shape, group, key",
    [
        ((2,), GroupSpec(count=1, alpha=1.0, blur=3), "data.groups[0].blur"),
        ((5,), GroupSpec(count=1, alpha=1.0, patch=1), "data.groups[0].patch"),
        ((1, 8, 8), GroupSpec(count=1, alpha=1.0, patch=9), "data.groups[0].patch"),
        ((3, 4, 6), GroupSpec(count=1, alpha=1.0, rotation=90.0), "data.groups[0].rotation"),
        ((3, 4, 6), GroupSpec(count=1, alpha=1.0, rotation=-270.0), "data.groups[0].rotation"),
    ],
)
def test_refused(shape, group, key):
    with pytest.raises(ConfigError) as e:
        check_transforms((GroupSpec(count=1, alpha=1.0), group), dataset(shape))
    assert str(e.value).startswith(key.replace("[0]", "[1]"))
    assert e.value.exit_code == 2


@pytest.mark.parametrize(
    "shape, group",
    [
        ((2,), GroupSpec(count=1, alpha=1.0, rotation=30.0, shift=1.0, noise=0.1)),
        ((1, 8, 8), GroupSpec(count=1, alpha=1.0, patch=8, blur=3, rotation=90.0)),
        ((3, 4, 6), GroupSpec(count=1, alpha=1.0, rotation=180.0)),
        ((3, 4, 6), GroupSpec(count=1, alpha=1.0, rotation=45.0)),
    ],
)
def test_accepted(shape, group):
    check_transforms((group,), dataset(shape))
