"""Counter-based minibatches (``train.batches = "counter"``): a client's batch indices are
a pure function of its seed, the pass over its data and the sample's index, computed for
a whole chunk of clients at once, with integer arithmetic only, on the device that trains
them. No generator is kept per client, nothing is drawn on the host, and the bits are the
same on the CPU and on a GPU, whatever the chunk, the rank or the world size.

The draw is :class:`~distfl.train.sequential.BatchStream`'s in form: one permutation of
the client's n samples per pass, each cut into n // b batches of b = min(batch size, n)
(the remainder skipped). Pass p's permutation sorts the samples by

    key(i) = mix(k_p ^ mix(i + 1)),   k_p = mix(mix(s_hi ^ mix(s_lo ^ A)) ^ mix(p + B))

where ``mix`` is the 32-bit bijective integer hash "lowbias32" (two xor-shift/multiply
rounds), s_lo and s_hi the low and high 32 bits of the client's seed, and A, B fixed
constants. For a fixed pass the key is a bijection of i, so no two samples tie and the
sort is a permutation. Every product is formed from 16-bit halves, so that no
intermediate leaves int64 (:func:`mul32`): the hash is exact in torch on any device and
in plain Python (:func:`mix_int`, the tests' reference)."""

from __future__ import annotations

import torch

MASK = 0xFFFFFFFF
#: lowbias32's multipliers (Chris Wellons' hash-prospector)
M1, M2 = 0x7FEB352D, 0x846CA68B
#: the constants that set the seed's and the pass's inputs apart (π's and φ's digits)
A, B = 0x243F6A88, 0x9E3779B9
#: a key past every sample's (padding sorts last)
PAST = 1 << 32


def mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x · c) mod 2³² for int64 ``x`` in [0, 2³²) and a 32-bit constant ``c``: the
    product taken as x·c_lo + ((x·c_hi) mod 2¹⁶)·2¹⁶, each term below 2⁴⁹."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & MASK


def mix(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 of int64 ``x`` in [0, 2³²), elementwise: a bijection of 32-bit words."""
    x = x ^ (x >> 16)
    x = mul32(x, M1)
    x = x ^ (x >> 15)
    x = mul32(x, M2)
    return x ^ (x >> 16)


def mix_int(x: int) -> int:
    """:func:`mix` of one Python integer, with Python's exact arithmetic."""
    x &= MASK
    x ^= x >> 16
    x = (x * M1) & MASK
    x ^= x >> 15
    x = (x * M2) & MASK
    return x ^ (x >> 16)


def pass_keys(seeds: torch.Tensor, passes: int) -> torch.Tensor:
    """k_p of each client (int64 ``seeds`` [C], non-negative) and pass p < ``passes``:
    [C, passes]."""
    lo, hi = seeds & MASK, (seeds >> 32) & MASK
    client = mix(hi ^ mix(lo ^ A))
    p = torch.arange(passes, dtype=torch.int64, device=seeds.device)
    return mix(client[:, None] ^ mix((p + B) & MASK)[None, :])


#: the keys one slice of clients sorts at most (a chunk of many clients of many samples
#: is drawn a slice of clients at a time, each slice's temporaries some 8 bytes a key)
SLICE_KEYS = 1 << 22


def counter_rows(
    nums: torch.Tensor, seeds: torch.Tensor, batch_size: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client's first ``steps`` batches, for clients of ``nums`` [C] train samples and
    ``seeds`` [C] (int64 tensors on the device that trains them): (the sample indices, each
    into its own client's samples, [steps, C, b_max]; the batch sizes b = min(batch_size,
    n), [C]). Row entries past a client's b are 0 (the callers pad them). A client's rows
    do not depend on the other clients of the chunk."""
    nums = nums.to(torch.int64)
    b = torch.clamp(nums, max=batch_size)
    per_pass = nums // b
    passes = int(((steps + per_pass - 1) // per_pass).max())
    n_max, b_max = int(nums.max()), int(b.max())
    step = max(1, SLICE_KEYS // (passes * n_max))
    parts = [
        _rows(nums[a : a + step], seeds[a : a + step], b[a : a + step], steps, passes, n_max,
              b_max)
        for a in range(0, len(nums), step)
    ]  # fmt: skip
    return (parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)), b


def _rows(nums, seeds, b, steps: int, passes: int, n_max: int, b_max: int) -> torch.Tensor:
    """:func:`counter_rows`'s sample indices of one slice of clients [steps, C, b_max]."""
    device = nums.device
    per_pass = nums // b
    k = pass_keys(seeds.to(torch.int64), passes)  # [C, P]
    i = torch.arange(n_max, dtype=torch.int64, device=device)
    keys = mix(k[:, :, None] ^ mix(i + 1)[None, None, :])  # [C, P, n_max]
    keys = torch.where(i[None, None, :] < nums[:, None, None], keys, PAST)
    order = torch.argsort(keys, dim=-1)  # each pass's permutation, padding last
    s = torch.arange(steps, dtype=torch.int64, device=device)[:, None]  # [S, 1]
    p, q = s // per_pass[None, :], s % per_pass[None, :]  # [S, C]
    j = torch.arange(b_max, dtype=torch.int64, device=device)
    at = (q * b[None, :])[:, :, None] + torch.minimum(j[None, None, :], b[None, :, None] - 1)
    flat = order.reshape(order.shape[0], -1)  # [C, P * n_max]
    where = (p[:, :, None] * n_max + at).permute(1, 0, 2).reshape(len(nums), -1)
    rows = torch.gather(flat, 1, where).reshape(len(nums), steps, b_max).permute(1, 0, 2)
    return torch.where(j[None, None, :] < b[None, :, None], rows, 0)


__all__ = ["counter_rows", "mix", "mix_int", "mul32", "pass_keys"]
