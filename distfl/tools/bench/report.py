"""The report of ``distfl bench``: the targets it checks, the table it prints, and the
same as one JSON object (``--json``).

The targets: (1) distfl W=1 reaches at least 6x the plain loop's client-steps/s with the
mlp, 1.5x with the cnn; (2) its overhead is at most 10% at W=1 and 20% at W=3; (3) distfl
W=1 reaches at least 30x Flower's rounds/s; (4) the exact sums' reduce moves at most 8
bytes per parameter. Each is met, not met, or n/a when a row it needs is missing.
"""

from __future__ import annotations

import math
from typing import TextIO

from distfl.tools.bench.workload import W3, Workload

#: (1) distfl W=1 client-steps/s >= this many times the plain loop's, per model
TARGET_SPEEDUP = {"mlp": 6.0, "cnn": 1.5}
TARGET_OVERHEAD_W1 = 0.10  # (2) overhead <= 10% at W=1 ...
TARGET_OVERHEAD_W3 = 0.20  # ... and <= 20% at W=3
TARGET_FLOWER = 30.0  # (3) distfl rounds/s >= 30x Flower's
TARGET_SUM_BYTES = 8.0  # (4) bytes per parameter in the exact sums' reduce


def targets(w: Workload, rows: dict[str, dict]) -> list[dict]:
    """The three targets, each with its threshold, value, whether it is met and a detail."""

    def ok(key: str) -> dict | None:
        row = rows.get(key)
        return row if row is not None and row["status"].startswith("ok") else None

    plain, w1, seq, w3, fl = (
        ok("plain"),
        ok("distfl_w1"),
        ok("distfl_w1_sequential"),
        ok(f"distfl_w{W3}"),
        ok("flower"),
    )
    return [
        _speedup_target(w, plain, w1, seq),
        _overhead_target(w1, w3, seq),
        _flower_target(rows, w1, w3, fl),
        _sum_bytes_target(w1, w3),
    ]


def _speedup_target(w: Workload, plain: dict | None, w1: dict | None, seq: dict | None) -> dict:
    """(1) distfl W=1's client-steps/s over the plain loop's."""
    speedup = TARGET_SPEEDUP.get(w.model, TARGET_SPEEDUP["mlp"])
    scope = "" if w.model in TARGET_SPEEDUP else f" (set for mlp and cnn; this run: {w.model})"
    t1 = {
        "id": 1,
        "text": f"distfl W=1 >= {speedup:g}x the plain loop's client-steps/s{scope}",
        "threshold": speedup,
        "value": None,
        "met": None,
        "detail": "n/a: a row is missing",
    }
    if plain and w1:
        t1["value"] = w1["ratio_to_plain"]
        t1["met"] = t1["value"] >= speedup
        t1["detail"] = f"{t1['value']:.2f}x with {w.model}"
        if seq:
            t1["detail"] += f" (sequential trainer: {seq['ratio_to_plain']:.2f}x)"
    return t1


def _overhead_target(w1: dict | None, w3: dict | None, seq: dict | None) -> dict:
    """(2) distfl's overhead beyond local training at W=1 and at W=3."""
    parts, met = [], []
    for row, limit, name in ((w1, TARGET_OVERHEAD_W1, "W=1"), (w3, TARGET_OVERHEAD_W3, f"W={W3}")):
        if row is None or row["overhead"] is None:
            parts.append(f"{name} n/a")
            met.append(None)
        else:
            parts.append(f"{name} {100 * row['overhead']:.1f}%")
            met.append(row["overhead"] <= limit)
    if seq is not None and seq["overhead"] is not None:
        parts.insert(1, f"(W=1 sequential {100 * seq['overhead']:.1f}%)")
    return {
        "id": 2,
        "text": f"overhead <= {100 * TARGET_OVERHEAD_W1:.0f}% at W=1 and "
        f"<= {100 * TARGET_OVERHEAD_W3:.0f}% at W={W3}",
        "threshold": [TARGET_OVERHEAD_W1, TARGET_OVERHEAD_W3],
        "value": [w1["overhead"] if w1 else None, w3["overhead"] if w3 else None],
        "met": None if None in met else all(met),
        "detail": ", ".join(parts),
    }


def _flower_target(
    rows: dict[str, dict], w1: dict | None, w3: dict | None, fl: dict | None
) -> dict:
    """(3) distfl W=1's rounds/s over Flower's."""
    t3 = {
        "id": 3,
        "text": f"distfl W=1 >= {TARGET_FLOWER:g}x Flower's rounds/s",
        "threshold": TARGET_FLOWER,
        "value": None,
        "met": None,
        "detail": "n/a: " + (rows["flower"]["status"] if "flower" in rows else "no Flower row"),
    }
    if w1 and fl:
        t3["value"] = w1["rounds_per_s"] / fl["rounds_per_s"]
        t3["met"] = t3["value"] >= TARGET_FLOWER
        t3["detail"] = f"{t3['value']:.1f}x"
        if w3:
            t3["detail"] += f" (W={W3}: {w3['rounds_per_s'] / fl['rounds_per_s']:.1f}x)"
    return t3


def _sum_bytes_target(w1: dict | None, w3: dict | None) -> dict:
    """(4) the bytes per parameter of the exact sums' reduce."""
    measured = [r for r in (w1, w3) if r and r.get("sum_bytes_per_param")]
    t4 = {
        "id": 4,
        "text": f"the exact sums' reduce <= {TARGET_SUM_BYTES:g} bytes per parameter",
        "threshold": TARGET_SUM_BYTES,
        "value": None,
        "met": None,
        "detail": "n/a: no distfl row recorded it",
    }
    if measured:
        t4["value"] = max(r["sum_bytes_per_param"] for r in measured)
        t4["met"] = t4["value"] <= TARGET_SUM_BYTES
        t4["detail"] = f"{t4['value']:.2f} bytes per parameter"
    return t4


def _bytes(n: float | None, note: str) -> str:
    if n is None:
        return f"n/a ({note})" if note else "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            text = f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
            return f"{text} ({note})" if note else text
        value /= 1024
    return ""


def print_report(report: dict, stream: TextIO) -> None:
    """The report as the table ``distfl bench`` prints, its notes and targets."""
    w = report["workload"]
    out = stream.write
    out(
        f"distfl bench: digits, {w['clients']} clients, {w['per_round']} per round, "
        f"{w['model']} ({w['num_params']:,} parameters), {w['steps']} local steps of batch "
        f"{w['batch']}, {w['rounds']} rounds, FedAvg; CPU, 1 torch thread per process "
        f"(distfl {report['distfl_version']}, torch {report['torch_version']})\n\n"
    )
    head = ("", "rounds/s", "client-steps/s", "vs plain", "overhead", "sum B/param", "bytes/round")
    lines = []
    for letter, row in zip("abcdefgh", report["rows"], strict=False):
        name = f"{letter}. {row['label']}"
        if not row["status"].startswith("ok"):
            lines.append((name, row["status"]))
            continue
        lines.append(
            (
                name,
                f"{row['rounds_per_s']:.2f}",
                f"{row['client_steps_per_s']:.0f}",
                "n/a" if row["ratio_to_plain"] is None else f"{row['ratio_to_plain']:.2f}x",
                "n/a" if row["overhead"] is None else f"{100 * row['overhead']:.1f}%",
                "—" if not row.get("sum_bytes_per_param") else f"{row['sum_bytes_per_param']:.2f}",
                _bytes(row["bytes_per_round"], row["bytes_note"]),
            )
        )
    width = max([len(head[0]), *(len(line[0]) for line in lines)])
    cols = [len(h) for h in head[1:6]]
    for line in lines:
        if len(line) > 2:
            cols = [max(c, len(v)) for c, v in zip(cols, line[1:6], strict=True)]
    fmt = "  ".join(f"{{:>{c}}}" for c in cols)
    out(f"{head[0]:<{width}}  {fmt.format(*head[1:6])}  {head[6]}\n")
    for line in lines:
        if len(line) == 2:
            out(f"{line[0]:<{width}}  {line[1]}\n")
        else:
            out(f"{line[0]:<{width}}  {fmt.format(*line[1:6])}  {line[6]}\n")
    out(
        "\nrates over each row's rounds loop; every process warms torch up first, untimed "
        f"(one-time lazy imports: {report['warm_up_s']:.1f} s here)\n"
        "overhead = share of the rounds loop's wall time not spent in local training:\n"
    )
    for letter, row in zip("abcdefgh", report["rows"], strict=False):
        if row["status"].startswith("ok"):
            extra = "; ".join([row["overhead_note"], *row["notes"]])
            out(f"  {letter}. {extra}\n")
    out("\ntargets\n")
    for t in report["targets"]:
        mark = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
        out(f"  [{mark:^7}] ({t['id']}) {t['text']}: {t['detail']}\n")
    if "server_math" in report:
        out(
            "\nFedGWC server math (affinity + choose_split, a fresh process per K; synthetic "
            "converged P, three groups, noise 1/sqrt(2K))\n"
        )
        out(
            f"{'K':>7}  {'affinity s':>10}  {'split s':>8}  {'total s':>8}  {'clusters':>8}  "
            f"{'best DB':>7}  {'W':>7}  {'P GiB':>6}  {'peak RSS GiB':>12}\n"
        )
        for r in report["server_math"]:
            if r["status"] != "ok":
                out(f"{r['K']:>7,}  {r['status']}\n")
                continue
            out(
                f"{r['K']:>7,}  {r['affinity_s']:>10.2f}  {r['split_s']:>8.2f}  "
                f"{r['total_s']:>8.2f}  {r['n_clusters']:>8}  {r['best_db']:>7.4f}  "
                f"{r['W_dtype']:>7}  {r['P_gib']:>6.2f}  "
                f"{r['peak_rss_gib']:>12.2f}\n"
            )
    stream.flush()


def json_safe(value):
    """``value`` with every NaN or infinity as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
