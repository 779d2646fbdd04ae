"""CIFAR-100 from its python pickle files under ``data.root`` (never downloaded): CIFAR-10's
spec and reader with 100 classes."""

from __future__ import annotations

from distfl.datasets.cifar10 import Cifar10
from distfl.datasets.registry import register


@register
class Cifar100(Cifar10):
    name = "cifar100"
    files = "`cifar-100-python/` with `train` and `test`"
    classes_text = "100 (fine labels)"
    num_classes = 100
