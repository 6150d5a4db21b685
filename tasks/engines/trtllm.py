"""TensorRT-LLM: `trtllm-serve MODEL --extra_llm_api_options X.yaml` (engines.md §1).

Three shapes: one server (the PyTorch backend, or a TensorRT engine built by `trtllm-build`); a server larger than a
node (MPI ranks through `trtllm-llmapi-launch`, for srun --mpi=pmix); and disaggregated serving: N context servers,
M generation servers, each with its own YAML carrying `cache_transceiver_config`, behind `trtllm-serve
disaggregated -c disagg.yaml`. The engine is never imported. Output token ids stream in `choices[].token_ids` when a
request sets `detokenize: false` (TRT-LLM's openai_protocol.py / postprocess_handlers.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from submission.plan.engine_options import OptionsLike, TrtllmOptions, TrtllmPool
from submission.plan.topology import Pool, place
from tasks.engines import Endpoint, EngineBackend, Placement, ProcessSpec
from tasks.engines.common import (
    OFFLINE_ENV,
    check_checkpoint,
    engine_version,
    gpu_env,
    interpreter_of,
    ready_probes,
    scratch,
)

DISTS = ("tensorrt-llm", "tensorrt_llm")
# LLM-API options Podium sets unless the plan's llm_api_options say otherwise, per backend: the PyTorch backend fills
# trtllm-serve's GET /metrics (iteration stats: running and queued requests, KV blocks; tasks/serving/telemetry.py)
# only with `enable_iter_perf_stats` (NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py TorchLlmArgs, default
# False, read at commit fcd3f31; openai_server.py notes the tensorrt backend has no such option and always has them).
TELEMETRY_DEFAULTS: dict[str, dict[str, Any]] = {"pytorch": {"enable_iter_perf_stats": True}}
LAUNCH = "trtllm-llmapi-launch"   # runs trtllm-serve under MPI (one rank per GPU, srun --mpi=pmix)


def _yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=True)


class TrtllmBackend(EngineBackend):
    name = "trtllm"
    ports_needed = 1


    def version(self, options: OptionsLike | None = None) -> str:
        o = self.options(options or {})
        return engine_version("TensorRT-LLM", o.version, interpreter_of(o.cli), DISTS,
                              fix="run on a host (or in the image) that has TensorRT-LLM, or pin options.version")

    def model_name(self, o: TrtllmOptions, model_dir: Path) -> str:
        """trtllm-serve names the model after the folder it serves (openai_server.py): the checkpoint's, or the
        built engine's."""
        return "engine" if o.backend == "tensorrt" else model_dir.name

    # --- topology -------------------------------------------------------------------------------------------
    def _pools(self, o: TrtllmOptions) -> list[Pool]:
        d = o.disaggregated
        assert d is not None
        return [Pool("context", d.context.servers, d.context.gpus, d.context.nodes),
                Pool("generation", d.generation.servers, d.generation.gpus, d.generation.nodes)]

    def _span(self, o: TrtllmOptions) -> int:
        """Nodes one aggregated server spans."""
        return max(1, math.ceil(o.gpus / o.gpus_per_node)) if o.gpus_per_node else 1

    def demand(self, options: OptionsLike) -> tuple[int, int]:
        o = self.options(options)
        if o.disaggregated is None:
            return self._span(o), 1
        per_node = [0] * o.nodes
        for slot in place(self._pools(o), o.nodes, o.gpus_per_node):
            per_node[slot.node] += 1
        per_node[0] += 1   # the router
        return o.nodes, max(per_node)

    # --- files ------------------------------------------------------------------------------------------------
    def _llm_api(self, o: TrtllmOptions, pool: TrtllmPool | None, role: str | None) -> dict[str, Any]:
        data = {**TELEMETRY_DEFAULTS.get(o.backend, {}), **o.llm_api_options, **(pool.llm_api_options if pool else {})}
        if o.disaggregated is not None and role is not None:
            ct = o.disaggregated.cache_transceiver
            data["cache_transceiver_config"] = ct.model_dump(exclude_none=True)
            if role == "context":
                data["disable_overlap_scheduler"] = True   # required on context servers (engines.md §1.5)
        return data

    def config_files(self, options: OptionsLike, build_dir: Path) -> dict[str, str]:
        """The LLM-API YAMLs, written by the build step and mounted into pods: path -> text."""
        o = self.options(options)
        if o.disaggregated is None:
            data = self._llm_api(o, None, None)
            return {str(build_dir / "llm_api_options.yaml"): _yaml(data)} if data else {}
        d = o.disaggregated
        return {str(build_dir / "context.yaml"): _yaml(self._llm_api(o, d.context, "context")),
                str(build_dir / "generation.yaml"): _yaml(self._llm_api(o, d.generation, "generation"))}

    def build_commands(self, options: OptionsLike, model_dir: Path, out_dir: Path) -> list[list[str]]:
        """The TensorRT engine path: convert the checkpoint, then trtllm-build (engines.md §1.2)."""
        o = self.options(options)
        if o.build is None:
            return []
        b, ckpt, engine = o.build, out_dir / "checkpoint", out_dir / "engine"
        convert = [b.python, b.convert_script, "--model_dir", str(model_dir), "--output_dir", str(ckpt),
                   "--dtype", b.dtype, "--tp_size", str(o.tensor_parallel_size),
                   "--pp_size", str(o.pipeline_parallel_size), *b.convert_args]
        build = [o.build_cli, "--checkpoint_dir", str(ckpt), "--output_dir", str(engine)]
        for flag, value in (("--max_batch_size", o.max_batch_size), ("--max_num_tokens", o.max_num_tokens),
                            ("--max_seq_len", o.max_seq_len), ("--max_input_len", b.max_input_len),
                            ("--gemm_plugin", b.gemm_plugin), ("--kv_cache_type", b.kv_cache_type),
                            ("--workers", b.workers)):
            if value is not None:
                build += [flag, str(value)]
        return [convert, [*build, *b.build_args]]

    def build(self, options: OptionsLike, model_dir: Path, out_dir: Path, runner: Any) -> list[str]:
        written = runner.check_checkpoint(model_dir, check_checkpoint(model_dir))
        for path, text in self.config_files(options, out_dir).items():
            written.append(runner.write(Path(path), text))
        for argv in self.build_commands(options, model_dir, out_dir):
            runner.run(argv)
        if self.options(options).build is not None:
            written += runner.expect(out_dir / "engine", ["config.json", "rank0.engine"])
        return written

    # --- processes ------------------------------------------------------------------------------------------
    def _serve(self, o: TrtllmOptions, model_dir: Path, build_dir: Path | None, host: str, port: int,
               par: Any, yaml_path: str | None) -> list[str]:
        if o.backend == "tensorrt":
            target = str((build_dir or model_dir) / "engine")
            argv = [o.cli, target, "--tokenizer", str(model_dir), "--backend", "tensorrt"]
        else:
            argv = [o.cli, str(model_dir), "--backend", "pytorch", "--tp_size", str(par.tensor_parallel_size),
                    "--pp_size", str(par.pipeline_parallel_size)]
            if par.expert_parallel_size is not None:
                argv += ["--ep_size", str(par.expert_parallel_size)]
        argv += ["--host", host, "--port", str(port)]
        if o.gpus_per_node:
            argv += ["--gpus_per_node", str(o.gpus_per_node)]
        for flag, value in (("--max_batch_size", o.max_batch_size), ("--max_num_tokens", o.max_num_tokens),
                            ("--max_seq_len", o.max_seq_len),
                            ("--kv_cache_free_gpu_memory_fraction", o.kv_cache_free_gpu_memory_fraction)):
            if value is not None:
                argv += [flag, str(value)]
        if o.trust_remote_code:
            argv.append("--trust_remote_code")
        if yaml_path:
            argv += ["--extra_llm_api_options", yaml_path]
        return argv + list(o.extra_args)

    def processes(self, options: OptionsLike, model_dir: Path, placement: Placement,
                  build_dir: Path | None = None) -> list[ProcessSpec]:
        o = self.options(options)
        files = self.config_files(options, build_dir or scratch(placement.workdir, None, self.name))
        by_name = {Path(p).name: p for p in files}
        env = {**OFFLINE_ENV, **o.env}
        model = self.model_name(o, model_dir)
        if o.disaggregated is None:
            span = self._span(o)
            gpus = o.gpus if o.gpus_per_node else 0
            yaml_path = by_name.get("llm_api_options.yaml")
            argv = self._serve(o, model_dir, build_dir, placement.bind_host(0), placement.node(0).ports[0], o,
                               yaml_path)
            ids = tuple(range(min(gpus, o.gpus_per_node))) if span == 1 else ()
            return [ProcessSpec(role="server", name="trtllm-server", argv=tuple([LAUNCH, *argv] if span > 1 else argv),
                                env={**env, **gpu_env(ids, placement.platform)},
                                host=placement.address(0, "trtllm-server"),
                                port=placement.node(0).ports[0], gpus=gpus, gpu_ids=ids, mpi_ranks=gpus if span > 1
                                else 1, nodes=span, probes=ready_probes(model),
                                files={p: files[p] for p in ([yaml_path] if yaml_path else [])}, bind=placement.bind)]
        return self._disaggregated(o, model_dir, placement, build_dir, files, by_name, env, model)

    def _disaggregated(self, o: TrtllmOptions, model_dir: Path, placement: Placement, build_dir: Path | None,
                       files: dict[str, str], by_name: dict[str, str], env: dict[str, str],
                       model: str) -> list[ProcessSpec]:
        d = o.disaggregated
        assert d is not None
        used = [1] + [0] * (o.nodes - 1)   # port 0 of node 0 is the router's
        specs, urls = [], {"context": [], "generation": []}
        for slot in place(self._pools(o), o.nodes, o.gpus_per_node):
            pool = d.context if slot.role == "context" else d.generation
            name = f"{'ctx' if slot.role == 'context' else 'gen'}-{slot.index}"
            port = placement.node(slot.node).ports[used[slot.node]]
            used[slot.node] += 1
            yaml_path = by_name[f"{slot.role}.yaml"]
            argv = self._serve(o, model_dir, build_dir, placement.bind_host(slot.node), port, pool, yaml_path)
            address = placement.address(slot.node, name)
            urls[slot.role].append(f"{address}:{port}")
            specs.append(ProcessSpec(role=slot.role, name=name, argv=tuple(argv),
                                     env={**env, **gpu_env(slot.gpu_ids, placement.platform)},
                                     host=address, port=port, gpus=len(slot.gpu_ids), gpu_ids=slot.gpu_ids,
                                     node_index=slot.node, probes=ready_probes(model),
                                     files={yaml_path: files[yaml_path]}, bind=placement.bind))
        port = placement.node(0).ports[0]
        router = {"hostname": placement.bind_host(0), "port": port, "backend": "pytorch",
                  "context_servers": {"num_instances": len(urls["context"]), "urls": urls["context"]},
                  "generation_servers": {"num_instances": len(urls["generation"]), "urls": urls["generation"]}}
        config = str(scratch(placement.workdir, build_dir, self.name) / f"disagg-{port}.yaml")
        argv = (o.cli, "disaggregated", "-c", config, "-t", str(d.server_start_timeout_s),
                "-r", str(d.request_timeout_s))
        specs.append(ProcessSpec(role="router", name="router", argv=argv, env=env,
                                 host=placement.address(0, "router"), port=port, probes=ready_probes(model),
                                 files={config: _yaml(router)}, bind=placement.bind))
        return specs

    def endpoint(self, options: OptionsLike, model_dir: Path, processes: list[ProcessSpec]) -> Endpoint:
        front = processes[-1]   # the router when disaggregated, else the one server
        tokenizer = model_dir / "tokenizer.json"
        return Endpoint(base_url=f"http://{front.host}:{front.port}",
                        model=self.model_name(self.options(options), model_dir),
                        accepts_token_ids=True, returns_token_ids=True,
                        tokenizer=str(tokenizer) if tokenizer.is_file() else None,
                        request_fields={"detokenize": False})


BACKEND = TrtllmBackend()
