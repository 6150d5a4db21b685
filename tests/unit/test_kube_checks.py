"""Preflight's Kubernetes checks against an API server that does not answer: one clear problem each, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from submission.plan import model as plans
from tasks.ops.kube_checks import access_problems, image_problems

K8S_PLAN = Path(__file__).resolve().parents[2] / "deployments" / "plans" / "gpt-oss-120b-trtllm-k8s.yaml"


def closed_port() -> int:
    with socket.socket() as s:   # bound, then closed: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_api_server_that_does_not_answer_is_one_problem_naming_it(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{closed_port()}"}}],
        "users": [{"name": "podium", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "podium"}}]}))
    bench = plans.load(K8S_PLAN).benchmarks[0]
    k8s = bench.engine.kubernetes.model_copy(update={"kubeconfig": str(kubeconfig)})   # type: ignore[union-attr]
    bench = bench.model_copy(update={"engine": bench.engine.model_copy(update={"kubernetes": k8s})})
    for problems in (access_problems(bench, tmp_path / "state", "benchmarks.0.engine"),
                     image_problems(bench, tmp_path / "state", {}, "benchmarks.0.engine")):
        [problem] = problems
        assert "the Kubernetes API server does not answer" in problem.message
        assert problem.message.startswith(f"{bench.system}: ") and "kubectl cluster-info" in problem.fix
        assert problem.where == "benchmarks.0.engine"
