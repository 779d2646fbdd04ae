"""Each algorithm's own keys under [algorithm]: found through the registry, checked by the
algorithm itself, former flat names kept working, a layer that names another algorithm
starting its keys afresh, and algorithms of one's own loaded through ``run.plugins``."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from timing import limit

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest
from cliproc import assert_one_line_error

from distfl.algorithms import (
    ClientHalf,
    ClusteringAlgorithm,
    Params,
    RoundPlan,
    algorithm_class,
    algorithm_names,
    key_owners,
    register,
)
from distfl.algorithms.emdcfl import EMDCFLParams
from distfl.algorithms.fedgwc import FedGWCParams
from distfl.config import build, describe_algorithm_keys, from_json, load
from distfl.errors import ConfigError
from distfl.plugins import ALGORITHMS

BUILT_IN = ["cfl", "cflgp", "emdcfl", "fedclust", "fedgwc", "fesem", "flcl", "flexcfl", "ifca",
            "none",
            "oracle", "pacfl"]  # fmt: skip


def error(**kw) -> str:
    with pytest.raises(ConfigError) as info:
        load(**kw)
    assert info.value.exit_code == 2
    text = str(info.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------ the registry


def test_every_built_in_algorithm_is_found_by_itself():
    assert set(BUILT_IN) <= set(algorithm_names())
    for name in BUILT_IN:
        cls = algorithm_class(name)
        assert cls.name == name and issubclass(cls.Params, Params)


def test_key_owners_know_fields_and_former_names():
    assert key_owners("epsilon") == ["emdcfl", "fedgwc"]
    assert key_owners("emd_epsilon") == ["emdcfl"]
    owners = [
        "cflgp",
        "fedce",
        "fedclust",
        "fedem",
        "fedrc",
        "fedsoft",
        "fesem",
        "flexcfl",
        "ifca",
        "pacfl",
    ]
    assert key_owners("num_clusters") == owners
    assert key_owners("no_such_key") == []


def test_register_refuses_what_it_cannot_run():
    class Nameless(ClusteringAlgorithm):
        def plan(self, round_index):
            return RoundPlan(round_index, {})

    with pytest.raises(ValueError, match="lower-case name"):
        register(Nameless)
    with pytest.raises(TypeError):
        register(type("NotAnAlgorithm", (), {"name": "x"}))

    class ProbesWithoutHalf(Nameless):
        name = "probes_without_half"
        client_ops = ("x",)

    with pytest.raises(TypeError, match="client half"):
        register(ProbesWithoutHalf)

    class Taken(Nameless):
        name = "fedgwc"

    with pytest.raises(ValueError, match="taken"):
        register(Taken)
    assert algorithm_class("fedgwc").__module__ == "distfl.algorithms.fedgwc.algorithm"


def test_unknown_algorithm_names_the_registered_ones():
    text = error(overrides=["algorithm.name=kmeans"])
    assert "algorithm.name = 'kmeans'" in text
    for name in BUILT_IN:
        assert name in text


# ------------------------------------------------------------------ keys


def test_the_named_algorithms_keys_and_defaults():
    c = load(overrides=['algorithm.name="fedgwc"', "algorithm.beta=2"])
    assert c.algorithm.params == FedGWCParams(beta=2.0)
    assert c.algorithm.beta == 2.0 and c.algorithm.epsilon == 1e-4
    assert c.to_dict()["algorithm"] == {"name": "fedgwc", **FedGWCParams(beta=2.0).as_kwargs()}
    with pytest.raises(AttributeError, match="no key"):
        _ = c.algorithm.eps1


def test_a_key_of_another_algorithm_is_refused_naming_its_owner():
    text = error(overrides=['algorithm.name="fedgwc"', "algorithm.eps1=0.3"])
    assert text.startswith("unknown key algorithm.eps1 for algorithm.name = 'fedgwc'")
    assert "beta" in text and "db_threshold" in text and "eps1 is a key of cfl" in text
    text = error(overrides=["algorithm.epsilon=0.1"])  # the default algorithm: none
    assert "algorithm.name = 'none' (it takes no other key)" in text
    assert "epsilon is a key of emdcfl, fedgwc" in text


def test_former_flat_names_keep_working():
    c = load(preset="rotated", overrides=['algorithm.name="emdcfl"', "algorithm.emd_epsilon=0.15",
                                          'algorithm.emd_solver="sinkhorn"'])  # fmt: skip
    assert c.algorithm.params == EMDCFLParams(epsilon=0.15, solver="sinkhorn")
    assert "emd_epsilon" not in c.to_dict()["algorithm"]
    flcl = load(overrides=['algorithm.name="flcl"', "algorithm.flcl_period=3"]).algorithm
    assert flcl.period == 3
    text = error(overrides=['algorithm.name="emdcfl"', "algorithm.emd_steps=4",
                            "algorithm.steps=5"])  # fmt: skip
    assert "algorithm.emd_steps and algorithm.steps are the same key of emdcfl" in text
    text = error(overrides=['algorithm.name="fedgwc"', "algorithm.emd_epsilon=0.15"])
    assert "emd_epsilon is a key of emdcfl" in text


def test_each_algorithm_checks_its_own_values():
    cases = [
        ("fedgwc", "beta=0", "algorithm.beta = 0.0: must be positive"),
        ("fedgwc", 'sampling="random"', "algorithm.sampling = 'random': allowed values are"),
        ("fedgwc", "n_max=1", "algorithm.n_max"),
        ("emdcfl", "projection=1.5", "algorithm.projection"),
        ("emdcfl", 'solver="lp"', "algorithm.solver"),
        # a billion local steps for ω_c passed every check and trained for hours
        ("emdcfl", "steps=1000000000", "algorithm.steps = 1000000000: must be between 1 and"),
        ("cfl", "eps2=-1", "algorithm.eps2"),
        ("ifca", "num_clusters=21", "0 (the number of data groups) or 1 to data.num_clients (20)"),
        ("fesem", "reassign_every=0", "algorithm.reassign_every"),
        ("flexcfl", "num_clusters=21", "0 (the number of data groups) or 1 to data.num_clients"),
        ("flexcfl", "eta=1.5", "algorithm.eta = 1.5: must be between 0 and 1"),
        ("flexcfl", "eta=-0.1", "algorithm.eta = -0.1: must be between 0 and 1"),
        ("flexcfl", "pretrain_scale=0", "algorithm.pretrain_scale = 0: must be at least 1"),
        ("flcl", "eta=1.0", "algorithm.eta"),
        ("flcl", 'expel="random"', "algorithm.expel"),
        ("cflgp", "num_clusters=21", "0 (the number of data groups) or 1 to data.num_clients (20)"),
        ("cflgp", "period=0", "algorithm.period = 0: must be 1 to 1,000,000 rounds"),
        ("cflgp", "stop_round=0", "algorithm.stop_round = 0: must be round 1 or later"),
        ("cflgp", "batch=-1", "algorithm.batch = -1: must be 0 (train.batch_size) or a number"),
        ("cflgp", "restarts=0", "algorithm.restarts = 0: must be 1 to 1000 k-means runs"),
        ("cflgp", "profile_dim=-1", "algorithm.profile_dim = -1: must be 0 (the whole gradient)"),
    ]
    for name, item, needle in cases:
        assert needle in error(overrides=[f'algorithm.name="{name}"', f"algorithm.{item}"])
    text = error(overrides=['algorithm.name="flcl"', "train.local_steps=1"])
    assert "train.local_steps = 1: FLCL needs at least 2" in text
    # a rule of one algorithm does not bind another
    load(overrides=["train.local_steps=1"])


def test_a_wrong_type_names_the_key():
    assert "algorithm.beta = 'big': expected a number" in error(
        overrides=['algorithm.name="fedgwc"', 'algorithm.beta="big"']
    )


def test_string_keys_take_bare_words_on_the_command_line():
    c = load(overrides=["algorithm.name=fedgwc", "algorithm.sampling=uniform"])
    assert c.algorithm.sampling == "uniform"
    c = load(overrides=["algorithm.name=emdcfl", "algorithm.emd_solver=sinkhorn"])
    assert c.algorithm.solver == "sinkhorn"


# ------------------------------------------------------------------ layers


def test_naming_another_algorithm_starts_its_keys_afresh():
    default = load(preset="default").algorithm  # FedGWC with the default job's settings
    assert (default.name, default.epsilon, default.patience) == ("fedgwc", 1e-4, 10)
    emd = load(preset="default", overrides=['algorithm.name="emdcfl"']).algorithm
    assert emd.params == EMDCFLParams()  # not FedGWC's epsilon = 1e-4
    same = load(preset="default", overrides=['algorithm.name="fedgwc"']).algorithm
    assert same.epsilon == 1e-4 and same.patience == 10
    # the --set items are one layer: their order does not matter
    a = load(preset="default", overrides=["algorithm.epsilon=0.2", 'algorithm.name="emdcfl"'])
    b = load(preset="default", overrides=['algorithm.name="emdcfl"', "algorithm.epsilon=0.2"])
    assert a == b and a.algorithm.epsilon == 0.2
    assert load(preset="default", overrides=['algorithm.name="none"']).to_dict()["algorithm"] == {
        "name": "none"
    }


def test_a_file_then_another_algorithm_on_the_command_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[algorithm]\nname = "cfl"\neps1 = 0.3\nwarmup = 4\n')
    assert load(path=path).algorithm.params.as_kwargs() == {"eps1": 0.3, "eps2": 1.6,
                                                           "warmup": 4}  # fmt: skip
    assert load(path=path, overrides=["algorithm.eps2=2"]).algorithm.eps1 == 0.3
    ifca = load(path=path, overrides=['algorithm.name="ifca"']).algorithm
    assert ifca.params.as_kwargs() == {"num_clusters": 2, "init": "kmeans++", "fedavg_rounds": 0}


@pytest.mark.parametrize("name", BUILT_IN)
def test_toml_and_json_round_trips(name):
    c = load(preset="rotated", overrides=[f'algorithm.name="{name}"'])
    assert build(tomllib.loads(c.to_toml())) == c
    assert from_json(c.to_json()) == c


def test_describe_algorithm_keys():
    keys = describe_algorithm_keys()
    assert keys["none"] == [] and keys["oracle"] == []
    assert ("algorithm.beta", "a number", "0.5") in keys["fedgwc"]
    assert ("algorithm.expel", "a string", '"preference"') in keys["flcl"]
    assert [k for k, _, _ in keys["cfl"]] == ["algorithm.eps1", "algorithm.eps2",
                                              "algorithm.warmup"]  # fmt: skip


# ------------------------------------------------------------------ run.plugins

PLUGIN = """
from dataclasses import dataclass

from distfl.algorithms import ClusteringAlgorithm, Params, RoundPlan, register, require


@dataclass(frozen=True)
class EveryoneParams(Params):
    rounds_between: int = 1

    def check(self, config):
        require(self.rounds_between >= 1, "rounds_between", self.rounds_between, "at least 1")


@register
class Everyone(ClusteringAlgorithm):
    name = "{name}"
    Params = EveryoneParams

    def __init__(self, *, num_clients, clients_per_round, seed, rounds_between=1):
        super().__init__(num_clients=num_clients, clients_per_round=clients_per_round, seed=seed)

    def plan(self, round_index):
        return RoundPlan(round_index, {{int(k): "0" for k in self.tree.members("0")}})
"""


def test_a_plugin_file_adds_an_algorithm_with_its_keys(tmp_path):
    path = tmp_path / "everyone.py"
    path.write_text(PLUGIN.format(name="everyone_a"))
    items = [f"run.plugins=['{path}']", 'algorithm.name="everyone_a"']
    c = load(overrides=[*items, "algorithm.rounds_between=3"])
    assert c.algorithm.rounds_between == 3 and c.run.plugins == (str(path),)
    assert "algorithm.rounds_between = 0: must be at least 1" in error(
        overrides=[*items, "algorithm.rounds_between=0"]
    )
    assert from_json(c.to_json()) == c  # the stored config loads its plugins again


def test_a_plugin_of_a_taken_name_is_refused(tmp_path):
    path = tmp_path / "clash.py"
    path.write_text(PLUGIN.format(name="fedgwc"))
    text = error(overrides=[f"run.plugins=['{path}']"])
    assert text.startswith(f"run.plugins: '{path}' cannot be imported (ValueError:")
    assert "taken by distfl.algorithms.fedgwc.algorithm.FedGWC" in text


def test_plugins_that_cannot_be_imported(tmp_path):
    missing = tmp_path / "nope.py"
    assert error(overrides=[f"run.plugins=['{missing}']"]) == (
        f"run.plugins: {missing} does not exist; expected a Python file"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_anywhere\n")
    assert "(ModuleNotFoundError: No module named 'no_such_module_anywhere')" in error(
        overrides=[f"run.plugins=['{broken}']"]
    )
    assert "run.plugins: 'no_such_module_anywhere' cannot be imported" in error(
        overrides=["run.plugins=['no_such_module_anywhere']"]
    )


def test_a_plugin_file_imports_the_modules_beside_it(tmp_path, monkeypatch):
    """As it loads (``from beside_rule import ...``) and later: its folder stays on the
    module search path, as the workers need it for a client half named "module:Class"."""
    from distfl.algorithms import client_half

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "beside_rule.py").write_text("NAME = 'everyone_beside'\n")
    (folder / "beside_client.py").write_text(
        "from distfl.algorithms import ClientHalf\n\nclass Beside(ClientHalf):\n    pass\n"
    )
    code = "from beside_rule import NAME\n" + PLUGIN.format(name="{NAME}").replace(
        'name = "{NAME}"', 'name = NAME\n    client = "beside_client:Beside"'
    )
    (folder / "beside.py").write_text(code)
    monkeypatch.chdir(tmp_path)  # the plug-in is named from here, not from its folder
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        items = ["run.plugins=['elsewhere/beside.py']", 'algorithm.name="everyone_beside"']
        c = load(overrides=items)
        assert c.algorithm.name == "everyone_beside"
        assert client_half(algorithm_class("everyone_beside")).__name__ == "Beside"
        assert sys.path[0] == str(folder.resolve())
    finally:
        ALGORITHMS.remove("everyone_beside")
        for name in ("beside_rule", "beside_client"):
            sys.modules.pop(name, None)


def test_a_plugin_module_is_found_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd_pkg").mkdir()
    (tmp_path / "cwd_pkg" / "__init__.py").write_text("")
    (tmp_path / "cwd_pkg" / "algo.py").write_text(PLUGIN.format(name="everyone_cwd"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    try:
        c = load(overrides=["run.plugins=['cwd_pkg.algo']", 'algorithm.name="everyone_cwd"'])
        assert c.algorithm.name == "everyone_cwd" and sys.path[0] == str(tmp_path.resolve())
        load(overrides=["run.plugins=['cwd_pkg.algo']"])  # once on the path is enough
        assert sys.path.count(str(tmp_path.resolve())) == 1
    finally:
        ALGORITHMS.remove("everyone_cwd")
        for name in ("cwd_pkg", "cwd_pkg.algo"):
            sys.modules.pop(name, None)


def test_cli_one_line_errors_for_algorithm_keys(tmp_path):
    def run(*items: str):
        args = [a for item in items for a in ("--set", item)]
        return subprocess.run(
            [sys.executable, "-m", "distfl", "run", "--preset", "digits", *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=limit(60),
        )  # fmt: skip

    assert_one_line_error(run('algorithm.name="cfl"', "algorithm.beta=2"),
                          "unknown key algorithm.beta", "beta is a key of fedgwc")  # fmt: skip
    assert_one_line_error(run('algorithm.name="cfl"', "algorithm.warmup=-1"), "algorithm.warmup")
    assert not list(tmp_path.iterdir())  # nothing was written


def test_a_client_half_is_named_not_imported_by_the_server_half():
    for name in ("emdcfl", "ifca"):
        cls = algorithm_class(name)
        assert isinstance(cls.client, str) and cls.client_ops
    from distfl.algorithms import client_half

    half = client_half(algorithm_class("emdcfl"))
    assert issubclass(half, ClientHalf) and half.__module__.endswith("emdcfl.client")


def test_params_dataclass_shape():
    @dataclass(frozen=True)
    class P(Params):
        a: int = 1
        b: str = "x"

    assert P().as_kwargs() == {"a": 1, "b": "x"}


def test_settings_are_declared_once_in_params():
    """An algorithm's settings come from its Params alone: built without any, it holds the
    declared defaults (the same as a run's config with none set), each also an attribute;
    ``params=`` and keywords in place of single values both give it; an unknown keyword
    names the settings."""
    for name in BUILT_IN:
        cls = algorithm_class(name)
        if name == "oracle":
            continue  # needs the groups
        alg = cls(num_clients=20, clients_per_round=20, seed=0)
        assert alg.params == cls.Params() == build({"algorithm": {"name": name}}).algorithm.params
    fedgwc = algorithm_class("fedgwc")
    alg = fedgwc(num_clients=20, clients_per_round=20, seed=0, patience=4)
    assert alg.params == FedGWCParams(patience=4) and alg.patience == 4
    assert alg.epsilon == FedGWCParams().epsilon
    given = FedGWCParams(beta=2.0)
    alg = fedgwc(num_clients=20, clients_per_round=20, seed=0, params=given, n_max=3)
    assert (alg.params.beta, alg.params.n_max, alg.beta) == (2.0, 3, 2.0)
    with pytest.raises(TypeError, match="no setting 'patiense'; its settings: beta, epsilon"):
        fedgwc(num_clients=20, clients_per_round=20, seed=0, patiense=4)


def test_a_setting_may_not_shadow_an_attribute_of_the_algorithm():
    @dataclass(frozen=True)
    class TreeParams(Params):
        tree: int = 1

    class Shadows(ClusteringAlgorithm):
        name = "shadows_tree"
        Params = TreeParams

        def plan(self, round_index):
            return RoundPlan(round_index, {})

    with pytest.raises(ValueError, match="Params.tree: each setting is also an attribute"):
        register(Shadows)


def test_an_init_of_keywords_is_still_called_with_them():
    """A plug-in written before ``params=``, whose ``__init__`` names its settings as
    keywords, is built by from_config with them."""
    from distfl.algorithms import Federation

    @dataclass(frozen=True)
    class AtParams(Params):
        at_round: int = 10

    class OldStyle(ClusteringAlgorithm):
        name = "old_style"
        Params = AtParams

        def __init__(self, *, num_clients, clients_per_round, seed, at_round=10):
            super().__init__(num_clients=num_clients, clients_per_round=clients_per_round,
                             seed=seed)  # fmt: skip
            self.seen = at_round

        def plan(self, round_index):
            return RoundPlan(round_index, {})

    alg = OldStyle.from_config(Federation(8, 4, 0), AtParams(at_round=3))
    assert alg.seen == 3 and alg.params == AtParams(at_round=3)
