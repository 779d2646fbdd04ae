"""The [participation] section: who takes part in a round (availability, dropouts, a
deadline, the clients' resources and the selection strategy)."""

from __future__ import annotations

from dataclasses import dataclass

from distfl.settings import setting


@dataclass(frozen=True)
class ParticipationSection:
    """Who takes part in a round ([Participation](participation.md)): every key at its
    default leaves every client always available, never dropping out and answering at once,
    and a run computes what it computed before the section existed."""

    availability: str = setting(
        "always",
        "`always`, `fraction`, `trace`",
        "whether a client is available at a round: `always`; `fraction` with probability "
        "f·(1 + a·sin(2π(t/P + φ_k))) clipped to [0, 1] (f its group's `availability` or "
        "`fraction`, a `diurnal`, P `period`, φ_k the client's phase), drawn from (seed, "
        "client, round); `trace` from the windows of `trace`",
    )
    fraction: float = setting(
        1.0, "[0, 1]", "f, the share of rounds a client is available (`fraction`)"
    )
    diurnal: float = setting(
        0.0, "[0, 1]", "a, the amplitude of the daily swing of availability (`fraction`)"
    )
    period: int = setting(24, "int ≥ 1", "P, the rounds of one day (`fraction`)")
    trace: str = setting(
        "",
        "path",
        "availability windows, a CSV file with the header `client,start,end` and one window of "
        "rounds per line (`start` ≤ `end`, both ≥ 1, inclusive); client k follows the trace "
        "client drawn for it from (seed, k)",
    )
    dropout: float = setting(
        0.0,
        "[0, 1)",
        "the probability that a selected client drops out before it reports, drawn from "
        "(seed, client, round); a group's `dropout` in its place",
    )
    resources: str = setting(
        "off",
        "`off`, `loguniform`, `trace`",
        "each client's compute speed and bandwidth, for the virtual clock: `off` (no clock); "
        "`loguniform` drawn log-uniformly in [`speed_min`, `speed_max`] and "
        "[`bandwidth_min`, `bandwidth_max`] from (seed, client); `trace` a profile of "
        "`resource_trace` drawn for each client from (seed, client)",
    )
    speed_min: float = setting(20.0, "> 0", "slowest compute speed (samples/s)")
    speed_max: float = setting(200.0, "≥ `speed_min`", "fastest compute speed (samples/s)")
    bandwidth_min: float = setting(1.0, "> 0", "narrowest link (Mbit/s, each way)")
    bandwidth_max: float = setting(20.0, "≥ `bandwidth_min`", "widest link (Mbit/s)")
    resource_trace: str = setting(
        "",
        "path",
        "device profiles, a CSV file with the header `speed,bandwidth` (samples/s, Mbit/s) "
        "and one profile per line",
    )
    deadline: float = setting(
        0.0,
        "≥ 0 (s)",
        "the round's deadline in simulated seconds: reports that arrive later are discarded "
        "(0: none; needs `resources`)",
    )
    selection: str = setting(
        "uniform",
        "`uniform`, `fedcs`, `fedpns`",
        "how the clients of a draw are chosen among the available ones: `uniform`; `fedcs` "
        "(Nishio and Yonetani 2019) keeps, of a uniform draw, those its greedy schedule fits "
        "into `deadline`; `fedpns` (Wu and Wang 2022) draws by probabilities it lowers for "
        "clients whose updates oppose the others' ([Participation](participation.md))",
    )
    pns_alpha: float = setting(
        2.0, "> 0", "FedPNS: α of a labeled client's loss p·min((ratio + β)^α, 1) (the code's)"
    )
    pns_beta: float = setting(0.7, "≥ 0", "FedPNS: β of the same (the code's)")
    pns_kept: float = setting(
        0.8,
        "(0, 1]",
        "FedPNS: the share of a cluster's reports its optimal aggregation keeps at least "
        "(the code keeps 8 of its 10)",
    )


__all__ = ["ParticipationSection"]
