"""The rules data pinned against mlcommons/inference at the commit it names (`inference_sources`: constants.py,
mlperf.conf, the compliance configs), and once against the real loadgen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from submission.base.errors import PlanError
from submission.rules import ROUNDS, AccuracyTarget, Rules, load_rules

LLMS = ("gpt-oss-120b", "llama3.1-8b", "llama2-70b-99.9", "deepseek-r1")
BENCHMARKS = (*LLMS, "qwen3-vl-235b-a22b")


@pytest.fixture(scope="module")
def v61() -> Rules:
    return load_rules("v6.1")


@pytest.fixture(scope="module")
def v60() -> Rules:
    return load_rules("v6.0")


# --- rounds, seeds, round-wide constants ---------------------------------------------------------------------------

def test_rounds_are_discovered_from_the_data_files() -> None:
    assert ROUNDS == ("v6.0", "v6.1")
    assert load_rules("v6.1") is load_rules("v6.1")  # cached


@pytest.mark.parametrize("round_", ["v6.0", "v6.1"])
def test_each_round_pins_the_inference_sources_its_values_cite(round_: str) -> None:
    # the v6.1 checker's commit, which also checks v6.0 trees (`podium fetch-inference` fetches it)
    pin = load_rules(round_).inference_sources
    assert (pin.repository, pin.commit) == ("https://github.com/mlcommons/inference",
                                            "b66003e10e2db4b8c36a448b0545ec90fcc6e9e9")


@pytest.mark.parametrize(("round_", "seeds"), [
    ("v6.1", (2085463073848966840, 2747215439041700203, 16159082839903944936)),
    ("v6.0", (2465351861681999779, 14276810075590677512, 3936089224930324775)),
])
def test_seeds(round_: str, seeds: tuple[int, int, int]) -> None:
    s = load_rules(round_).seeds
    assert (s.qsl_rng_seed, s.sample_index_rng_seed, s.schedule_rng_seed) == seeds


@pytest.mark.parametrize("round_", ROUNDS)
def test_round_constants(round_: str) -> None:
    rules = load_rules(round_)
    assert rules.round == round_
    assert rules.min_duration_ms == 600000
    assert rules.max_accuracy_log_bytes == 10240
    assert set(rules.benchmarks) == set(BENCHMARKS)
    fields = rules.system_fields
    assert len(fields.required) == 35 and len(set(fields.required)) == 35
    assert len(fields.non_empty) == 26 and set(fields.non_empty) <= set(fields.required)
    assert "accelerator_on-chip_memories" in fields.required and "system_type_detail" in fields.required
    assert fields.allowed["status"] == ("available", "preview", "rdi")
    assert fields.allowed["system_type"] == ("datacenter", "edge", "datacenter,edge", "edge,datacenter")
    assert rules.measurement_fields == (
        "input_data_types", "retraining", "starting_weights_filename", "weight_data_types", "weight_transformations")
    files = rules.required_files
    assert files.accuracy == ("mlperf_log_summary.txt", "mlperf_log_detail.txt", "accuracy.txt",
                              "mlperf_log_accuracy.json")
    assert files.performance == ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
    assert files.optional_performance == ("mlperf_log_accuracy.json",)
    assert set(files.scenario_root) == {"measurements.json", "user.conf", "README.md"}


def test_v60_equals_v61_where_the_reference_names_no_difference(v60: Rules, v61: Rules) -> None:
    for name in LLMS:
        old, new = v60.benchmark(name).model_dump(), v61.benchmark(name).model_dump()
        assert old.pop("endpoints_allowed") is False
        new.pop("endpoints_allowed")
        assert old == new, name
    assert v60.audits == v61.audits
    assert v60.system_fields == v61.system_fields


# --- per benchmark -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("bench", "scenario", "ttft_ms", "tpot_ms"), [
    ("gpt-oss-120b", "Server", 3000, 80),
    ("gpt-oss-120b", "Interactive", 2000, 15),
    ("llama3.1-8b", "Server", 2000, 100),
    ("llama3.1-8b", "Interactive", 500, 30),
    ("llama2-70b-99.9", "Server", 2000, 200),
    ("llama2-70b-99.9", "Interactive", 450, 40),
    ("deepseek-r1", "Server", 2000, 80),
    ("deepseek-r1", "Interactive", 1500, 15),
])
def test_token_latency_limits(v61: Rules, bench: str, scenario: str, ttft_ms: int, tpot_ms: int) -> None:
    sc = v61.benchmark(bench).scenario(scenario)
    assert (sc.ttft_ms, sc.tpot_ms) == (ttft_ms, tpot_ms)
    assert (sc.ttft_ns, sc.tpot_ns) == (ttft_ms * 1_000_000, tpot_ms * 1_000_000)
    assert sc.latency_ms is None and sc.latency_ns is None
    assert sc.loadgen_scenario == "Server"
    offline = v61.benchmark(bench).scenario("Offline")
    assert (offline.ttft_ms, offline.tpot_ms, offline.latency_ms) == (None, None, None)


@pytest.mark.parametrize("round_", ["v6.0", "v6.1"])
def test_server_target_latency_caps_are_the_checkers_latency_constraint(round_: str) -> None:
    """constants.py MODEL_CONFIG[round]["latency-constraint"], Server only (Interactive and Offline have none)."""
    caps = {"gpt-oss-120b": 60000, "deepseek-r1": 60000, "llama3.1-8b": 20000, "llama2-70b-99.9": 20000,
            "qwen3-vl-235b-a22b": 12000}
    rules = load_rules(round_)
    assert {name: b.scenario("Server").max_target_latency_ms for name, b in rules.benchmarks.items()} == caps
    assert rules.benchmark("gpt-oss-120b").scenario("Server").max_target_latency_ns == 60_000_000_000
    assert all(sc.max_target_latency_ms is None for b in rules.benchmarks.values() for sc in b.scenarios.values()
               if sc.name != "Server")


def test_test01_accuracy_delta_per_accuracy_class(v61: Rules) -> None:
    """configuration.py get_delta_perc: 0.1 % for a model named 99.9, 1 % for the others."""
    criteria = v61.audit("TEST01").criteria
    assert (criteria["accuracy_delta_pct_99"], criteria["accuracy_delta_pct_99.9"]) == (1.0, 0.1)
    assert {name: b.accuracy_class for name, b in v61.benchmarks.items()} == {
        "gpt-oss-120b": "99", "qwen3-vl-235b-a22b": "99", "llama3.1-8b": "99", "llama2-70b-99.9": "99.9",
        "deepseek-r1": "99"}
    with pytest.raises(ValidationError, match="disagrees with the name"):
        v61.benchmark("llama3.1-8b").model_validate(
            v61.benchmark("llama3.1-8b").model_dump() | {"accuracy_class": "99.9"})


def test_qwen_uses_end_to_end_latency(v60: Rules, v61: Rules) -> None:
    qwen = v61.benchmark("qwen3-vl-235b-a22b")
    assert qwen.use_token_latencies is False
    assert qwen.scenario("Server").latency_ns == 12_000_000_000
    assert qwen.scenario("Interactive").latency_ms == 1500
    for sc in qwen.scenarios.values():
        assert sc.ttft_ms is None and sc.tpot_ms is None and sc.ttft_ns is None
    assert v60.benchmark("qwen3-vl-235b-a22b").scenario("Server").latency_ms == 12000
    assert all(v61.benchmark(name).use_token_latencies for name in LLMS)


@pytest.mark.parametrize(("bench", "dataset", "psc", "acc_count", "min_spq"), [
    ("gpt-oss-120b", 6396, 6396, 4395, 6396),
    ("qwen3-vl-235b-a22b", 48289, 48289, 48289, 48289),
    ("llama3.1-8b", 13368, 13368, 13368, 13368),
    ("llama2-70b-99.9", 24576, 24576, 24576, 24576),
    ("deepseek-r1", 4388, 4388, 4388, 4388),
])
def test_sample_counts(v61: Rules, bench: str, dataset: int, psc: int, acc_count: int, min_spq: int) -> None:
    b = v61.benchmark(bench)
    assert (b.dataset.size, b.performance_sample_count, b.offline_min_samples_per_query) == (dataset, psc, min_spq)
    for name in ("Offline", "Server"):
        assert b.scenario(name).accuracy_sample_count == acc_count
    assert b.min_queries == {"SingleStream": 1024, "Server": 270336, "Offline": 1}


def test_qwen_interactive_has_its_own_dataset_and_target(v61: Rules) -> None:
    interactive = v61.benchmark("qwen3-vl-235b-a22b").scenario("Interactive")
    assert interactive.accuracy_sample_count == 8000
    assert interactive.dataset is not None and interactive.dataset.size == 8000
    assert interactive.dataset.name == "nvidia/Shopify-product-catalogue-8k"
    (target,) = interactive.accuracy
    assert (target.metric, target.target) == ("F1_HIERARCHICAL", pytest.approx(0.779922))


def test_gpt_oss_dataset_files(v61: Rules) -> None:
    files = v61.benchmark("gpt-oss-120b").dataset.files
    assert files == {"performance": "perf/perf_eval_ref.parquet", "accuracy": "acc/acc_eval_inputs.parquet",
                     "TEST07": "acc/acc_eval_compliance_gpqa.parquet"}


# (metric, target, upper limit) written as the reference writes them; a value matches to the digits given.
ACCURACY = {
    "gpt-oss-120b": [("exact_match", "82.2987", None), ("TOKENS_PER_SAMPLE", None, "10998.9")],
    "qwen3-vl-235b-a22b": [("F1_HIERARCHICAL", "0.782397", None)],
    "llama3.1-8b": [("ROUGE1", "38.3914", None), ("ROUGE2", "15.7484", None), ("ROUGEL", "24.2507", None),
                    ("ROUGELSUM", "35.4351", None), ("GEN_LEN", "7350879.6", "8984408.4")],
    "llama2-70b-99.9": [("ROUGE1", "44.3868", None), ("ROUGE2", "22.0132", None), ("ROUGEL", "28.5876", None),
                        ("TOKENS_PER_SAMPLE", "265.005", "323.895")],
    "deepseek-r1": [("exact_match", "80.5446", None), ("TOKENS_PER_SAMPLE", "3497.60", "4274.85")],
}


def _as_written(text: str | None) -> object:
    """`text` as a number, to the precision it is written with (half a unit of its last digit)."""
    if text is None:
        return None
    decimals = len(text.partition(".")[2])
    return pytest.approx(float(text), abs=0.5 * 10**-decimals + 1e-9)


@pytest.mark.parametrize("round_", ROUNDS)
@pytest.mark.parametrize("bench", BENCHMARKS)
def test_accuracy_targets(round_: str, bench: str) -> None:
    b = load_rules(round_).benchmark(bench)
    for name in ("Offline", "Server"):
        got = [(t.metric, t.target, t.upper_limit) for t in b.scenario(name).accuracy]
        assert got == [(m, _as_written(t), _as_written(u)) for m, t, u in ACCURACY[bench]]
    if "Interactive" in b.scenarios and bench != "qwen3-vl-235b-a22b":
        assert b.scenario("Interactive").accuracy == b.scenario("Offline").accuracy


def test_accuracy_target_passes() -> None:
    gen_len = AccuracyTarget(metric="GEN_LEN", target=7350879.6, upper_limit=8984408.4)
    assert gen_len.passes(7350879.6) and gen_len.passes(8984408.4) and gen_len.passes(8_000_000)
    assert not gen_len.passes(7350879.5) and not gen_len.passes(8984408.5)
    assert AccuracyTarget(metric="exact_match", target=82.2987).passes(1e9)
    upper_only = AccuracyTarget(metric="TOKENS_PER_SAMPLE", upper_limit=10998.9)
    assert upper_only.passes(0) and not upper_only.passes(11000) and not upper_only.required


@pytest.mark.parametrize(("bench", "text", "expected"), [
    ("gpt-oss-120b", "Evaluated 4395 samples\n'exact_match': 83.500\n", {"exact_match": 83.5}),
    ("qwen3-vl-235b-a22b", 'Results\n\n{"f1": 0.7887}\n\nhash=ab12\n', {"F1_HIERARCHICAL": 0.7887}),
    ("llama3.1-8b", "{'rouge1': 38.9, 'rouge2': 15.9, 'rougeL': 24.5, 'rougeLsum': 35.8, 'gen_len': 8167000, "
     "'gen_num': 13368}", {"ROUGE1": 38.9, "ROUGE2": 15.9, "ROUGEL": 24.5, "ROUGELSUM": 35.8, "GEN_LEN": 8167000}),
    ("llama2-70b-99.9", "{'rouge1': 44.43, 'rouge2': 22.04, 'rougeL': 28.62, 'tokens_per_sample': 294.4}",
     {"ROUGE1": 44.43, "ROUGE2": 22.04, "ROUGEL": 28.62, "TOKENS_PER_SAMPLE": 294.4}),
    ("deepseek-r1", "{'exact_match': 81.36, 'tokens_per_sample': 3886.2}",
     {"exact_match": 81.36, "TOKENS_PER_SAMPLE": 3886.2}),
])
def test_accuracy_patterns_read_the_evaluator_output(v61: Rules, bench: str, text: str,
                                                     expected: dict[str, float]) -> None:
    targets = v61.benchmark(bench).scenario("Offline").accuracy
    read = {t.metric: t.read(text) for t in targets if t.read(text) is not None}
    assert read == expected
    assert all(t.passes(read[t.metric]) for t in targets if t.metric in read)


@pytest.mark.parametrize(("bench", "loadgen", "interactive", "harness", "endpoints", "tests"), [
    ("gpt-oss-120b", "gpt-oss-120b", "gpt-oss-120b-interactive", "loadgen", True, ("TEST07", "TEST09")),
    ("qwen3-vl-235b-a22b", "qwen3-vl-235b-a22b", None, "endpoints", True, ()),
    ("llama3.1-8b", "llama3_1-8b", "llama3_1-8b-interactive", "loadgen", True, ("TEST06",)),
    ("llama2-70b-99.9", "llama2-70b", "llama2-70b-interactive", "loadgen", False, ("TEST06",)),
    ("deepseek-r1", "deepseek-r1", "deepseek-r1-interactive", "loadgen", True, ("TEST06",)),
])
def test_names_harness_and_compliance(v60: Rules, v61: Rules, bench: str, loadgen: str, interactive: str | None,
                                      harness: str, endpoints: bool, tests: tuple[str, ...]) -> None:
    b = v61.benchmark(bench)
    assert (b.name, b.loadgen_model, b.interactive_loadgen_model) == (bench, loadgen, interactive)
    assert (b.harness, b.endpoints_allowed, b.compliance_tests) == (harness, endpoints, tests)
    assert b.loadgen_model_for("Offline") == b.loadgen_model_for("Server") == loadgen
    if interactive:
        assert b.loadgen_model_for("Interactive") == interactive
    assert v60.benchmark(bench).compliance_tests == tests
    assert b.required_scenarios == ("Offline",)
    assert b.one_of_scenarios == ("Interactive", "Server")
    assert set(b.allowed_scenarios) == {"Offline", "Server", "Interactive"}


def test_qwen_v60_requires_server_and_offline_with_loadgen(v60: Rules) -> None:
    qwen = v60.benchmark("qwen3-vl-235b-a22b")
    assert (qwen.required_scenarios, qwen.one_of_scenarios) == (("Offline", "Server"), ())
    assert (qwen.harness, qwen.endpoints_allowed) == ("loadgen", False)
    with pytest.raises(PlanError, match=r"(?s)'Interactive'.*valid values: Offline, Server"):
        qwen.scenario("Interactive")


@pytest.mark.parametrize(("bench", "offline", "server"), [
    ("gpt-oss-120b", "result_tokens_per_second", "result_completed_tokens_per_second"),
    ("llama3.1-8b", "result_tokens_per_second", "result_completed_tokens_per_second"),
    ("llama2-70b-99.9", "result_tokens_per_second", "result_completed_tokens_per_second"),
    ("deepseek-r1", "result_tokens_per_second", "result_completed_tokens_per_second"),
    ("qwen3-vl-235b-a22b", "result_samples_per_second", "result_completed_samples_per_sec"),
])
def test_result_fields_and_units(v61: Rules, bench: str, offline: str, server: str) -> None:
    b = v61.benchmark(bench)
    tokens = bench != "qwen3-vl-235b-a22b"
    assert (b.scenario("Offline").result_field, b.scenario("Offline").unit) == (
        offline, "Tokens/s" if tokens else "Samples/s")
    for name in ("Server", "Interactive"):
        assert (b.scenario(name).result_field, b.scenario(name).unit) == (server, "Tokens/s" if tokens else "Queries/s")


# --- audit.config --------------------------------------------------------------------------------------------------

def test_audit_config_lines(v61: Rules) -> None:
    assert v61.audit("TEST06").config_lines("llama3.1-8b") == [
        "*.*.mode = 2", "*.*.accuracy_log_rng_seed = 720381539243781796", "*.*.accuracy_log_sampling_target = 100",
        "*.*.min_query_count = 100", "*.*.min_duration = 0", "*.*.sample_concatenate_permutation = 0"]
    test07 = v61.audit("TEST07")
    assert test07.values("gpt-oss-120b")["test07_accuracy_threshold"] == 60.698
    assert set(test07.config_lines("gpt-oss-120b")) == {
        "*.*.mode = 2", "*.*.accuracy_log_rng_seed = 720381539243781796", "*.*.accuracy_log_sampling_target = 990",
        "*.*.min_query_count = 990", "*.*.min_duration = 0", "*.*.performance_issue_unique = 1",
        "*.*.sample_concatenate_permutation = 0", "*.*.test07_accuracy_threshold = 60.698"}
    test09 = v61.audit("TEST09").values("gpt-oss-120b")
    assert (test09["test09_min_output_tokens"], test09["test09_max_output_tokens"]) == (1150.38, 1406.02)
    assert (test09["min_query_count"], test09["accuracy_log_sampling_target"]) == (6396, 10000)
    test04 = v61.audit("TEST04").config_lines()
    assert "*.Offline.performance_issue_same_index = 3" in test04
    assert "stable-diffusion-xl.Offline.min_query_count = 500" in test04
    for test in ("TEST01", "TEST06", "TEST07", "TEST09"):
        assert v61.audit(test).settings["accuracy_log_rng_seed"] == 720381539243781796
    assert v61.audit("TEST09").verify_files == ("verify_output_len.txt",)


def test_audit_without_values_for_the_benchmark_is_an_error(v61: Rules) -> None:
    with pytest.raises(PlanError, match=r"(?s)TEST07 .*'llama3\.1-8b'.*gpt-oss-120b"):
        v61.audit("TEST07").config_lines("llama3.1-8b")
    with pytest.raises(PlanError, match="accuracy_log_sampling_target"):
        v61.audit("TEST01").config_lines("gpt-oss-120b")


# --- errors and immutability ---------------------------------------------------------------------------------------

def test_unknown_round() -> None:
    with pytest.raises(PlanError) as caught:
        load_rules("v6.2")
    text = str(caught.value)
    assert "'v6.2'" in text and "did you mean" in text and "valid values: v6.0, v6.1" in text


def test_unknown_benchmark_scenario_and_audit(v61: Rules) -> None:
    with pytest.raises(PlanError) as caught:
        v61.benchmark("gpt-oss-12b")
    assert "'gpt-oss-12b'" in str(caught.value) and "did you mean 'gpt-oss-120b'" in str(caught.value)
    assert all(name in str(caught.value) for name in BENCHMARKS)
    with pytest.raises(PlanError) as caught:
        v61.benchmark("llama3.1-8b").scenario("Interactiv")
    assert "'Interactiv'" in str(caught.value)
    assert "did you mean 'Interactive'" in str(caught.value)
    assert "valid values: Interactive, Offline, Server" in str(caught.value)
    with pytest.raises(PlanError, match="'TEST99'"):
        v61.audit("TEST99")


def test_qwen_has_no_loadgen_interactive(v61: Rules) -> None:
    with pytest.raises(PlanError, match=r"qwen3-vl-235b-a22b has no loadgen Interactive"):
        v61.benchmark("qwen3-vl-235b-a22b").loadgen_model_for("Interactive")


def test_models_are_frozen_and_strict(v61: Rules) -> None:
    bench = v61.benchmark("gpt-oss-120b")
    with pytest.raises(ValidationError):
        v61.min_duration_ms = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        bench.performance_sample_count = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        bench.scenario("Server").ttft_ms = 1e9  # type: ignore[misc]
    with pytest.raises(ValidationError):
        bench.scenario("Server").accuracy[0].target = 0.0  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        Rules.model_validate({**v61.model_dump(), "surprise": 1})


# --- the real loadgen ----------------------------------------------------------------------------------------------

_SETTINGS = """
import json, sys
import mlperf_loadgen as lg
s = lg.TestSettings()
rc = s.FromConfig(sys.argv[1], sys.argv[2], sys.argv[3], 1)
keys = ("ttft_latency", "tpot_latency", "performance_sample_count_override", "accuracy_sample_count_override",
        "qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed", "use_token_latencies", "min_duration_ms",
        "min_query_count", "server_target_latency_ns", "sample_concatenate_permutation")
print(json.dumps({"rc": rc, **{k: getattr(s, k) for k in keys}}))
"""


def _loadgen_settings(user_conf: Path, model: str, scenario: str) -> dict[str, int]:
    # loadgen reads its embedded mlperf.conf only on the first FromConfig(conf_type=1) of a process: one process each.
    done = subprocess.run([sys.executable, "-c", _SETTINGS, str(user_conf), model, scenario],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_v61_matches_the_mlperf_conf_embedded_in_loadgen(v61: Rules, tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    user_conf = tmp_path / "user.conf"
    user_conf.write_text("# no overrides: every value below comes from loadgen's embedded mlperf.conf\n")
    seeds = v61.seeds
    checked = []
    for bench in v61.benchmarks.values():
        for sc in bench.scenarios.values():
            if sc.name == "Interactive" and bench.interactive_loadgen_model is None:
                continue
            model = bench.loadgen_model_for(sc.name)
            got = _loadgen_settings(user_conf, model, sc.loadgen_scenario)
            where = f"{model}/{sc.loadgen_scenario}"
            assert got["rc"] == 0, where
            assert (got["qsl_rng_seed"], got["sample_index_rng_seed"], got["schedule_rng_seed"]) == (
                seeds.qsl_rng_seed, seeds.sample_index_rng_seed, seeds.schedule_rng_seed), where
            assert got["performance_sample_count_override"] == bench.performance_sample_count, where
            assert (got["accuracy_sample_count_override"] or bench.dataset.size) == sc.accuracy_sample_count, where
            assert got["use_token_latencies"] == bench.use_token_latencies, where
            assert got["min_duration_ms"] == v61.min_duration_ms, where
            assert got["sample_concatenate_permutation"] == bench.sample_concatenate_permutation, where
            if sc.ttft_ns is not None:
                assert (got["ttft_latency"], got["tpot_latency"]) == (sc.ttft_ns, sc.tpot_ns), where
            if sc.loadgen_scenario == "Server":
                assert got["server_target_latency_ns"] == (sc.latency_ns or 0), where
            # mlperf.conf's Offline min_query_count where it sets one, else loadgen's own default (every Server)
            offline = bench.offline_min_query_count if sc.loadgen_scenario == "Offline" else None
            assert got["min_query_count"] == (offline or v61.loadgen_min_query_count), where
            checked.append(where)
    assert len(checked) == 14
