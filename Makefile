# How a GPU Trains AI: every target installs what it needs into .venv/ first.
#   make book    build the website into _build/html   (EXECUTE=1: re-run changed notebooks first)
#   make test    run every test: lint, unit tests, every notebook (nbval), the book build, a browser check, a PDF;
#                in WORKERS=2 pytest workers; it ends with a table of its phases and their wall times
#   make serve   serve _build/html on http://localhost:$(PORT)
#   make execute run the notebooks in place (store fresh outputs before committing)
#   make translations  extract the English messages into the Chinese catalogs, print what is untranslated
#   make pdf     build the website, then one PDF per edition (English, 繁體中文, 简体中文) beside its pages
SHELL := /bin/bash
.DEFAULT_GOAL := help
.PHONY: help setup book test lint serve execute translations browser-deps vendor clean bench-notebooks bench-sft bench-grpo pdf \
	pdf-deps record-posttrain record-scaling record-rewards

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed only if absent. Here a CPU build of 2.13.0 lies on disk; a bare
# `torch` would pull a multi-GB CUDA build. On a GPU machine: make setup TORCH=torch
TORCH ?= torch==2.13.0
# Triton for chapter 11's kernels: the version torch 2.13's CUDA build pins. The CPU build of torch
# does not pull it in, and its interpreter needs numpy, which Triton does not declare. Linux only.
TRITON ?= triton==3.7.1
EXECUTE ?= 0
PORT ?= 8000
NB ?= chapters/*.ipynb book/*.ipynb
PYTEST_ARGS ?=
# pytest-xdist workers of make test; each test file (each notebook) stays whole in one worker. 0: no workers
WORKERS ?= 2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

help:
	@sed -n '2,8p' Makefile | sed 's/^# //'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: $(PY) companion/pyproject.toml
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "$(TORCH)"
	@[ "$$(uname -s)" != Linux ] || $(PY) -c "import triton, numpy" 2>/dev/null || $(PY) -m pip install "$(TRITON)" numpy
	$(PY) -m pip install -e "companion[book]"
	@touch $@

setup: $(VENV)/.installed

# npm fetches MathJax, require.js and the widget manager at build time (book/tools/vendor.py)
vendor: setup
	@command -v npm >/dev/null || { $(SUDO) apt-get update -qq && $(APT_INSTALL) npm; }
	$(PY) book/tools/vendor.py

book: vendor
	$(PY) book/tools/build.py $(if $(filter 1 yes true,$(EXECUTE)),--execute)

# Debian's Chromium for the site check (tests/test_site.py); playwright drives it, never downloads one.
# Noto CJK so that the Chinese editions' screenshots show characters, not boxes.
browser-deps:
	@command -v chromium >/dev/null && fc-list 2>/dev/null | grep -q "Noto Sans CJK" || \
	  { $(SUDO) apt-get update -qq && $(APT_INSTALL) chromium fonts-noto-cjk; }

# make pdf prints the built site with the same Chromium (book/tools/pdf.py says why); pdfinfo and
# pdftotext (poppler-utils) read the PDF back; AR PL UMing is the Chinese type, embedded as TrueType.
pdf-deps: browser-deps
	@command -v pdftotext >/dev/null && fc-list 2>/dev/null | grep -q "AR PL UMing" && fc-list | grep -q "WenQuanYi Micro Hei" && fc-list | grep -q "DejaVu Sans" || \
	  { $(SUDO) apt-get update -qq && $(APT_INSTALL) poppler-utils fonts-arphic-uming fonts-wqy-microhei fonts-dejavu-core; }

# _build/html/how-a-gpu-trains-ai-en.pdf, zh-tw/how-a-gpu-trains-ai-zh-tw.pdf, zh-cn/how-a-gpu-trains-ai-zh-cn.pdf
pdf: book pdf-deps
	$(PY) book/tools/pdf.py

# English changed? New messages land in book/locales/zh_TW/ untranslated; translate them (see README)
translations: setup
	$(PY) book/tools/translations.py update

# ruff, with the rules and format in companion/pyproject.toml, over the package, tests and scripts
LINT_PATHS := companion tests bench book/tools
LINT := $(PY) -m ruff check --config companion/pyproject.toml $(LINT_PATHS) && \
	$(PY) -m ruff format --check --config companion/pyproject.toml $(LINT_PATHS)
lint: setup
	$(LINT)

# tests/phases.py runs each phase (every one, even after a failure), then prints their wall times
test: vendor browser-deps pdf-deps
	@$(PY) tests/phases.py \
	  lint "$(LINT)" \
	  "pytest -n $(WORKERS)" "$(PY) -m pytest -c tests/pytest.ini --rootdir=. -n $(WORKERS) --dist loadfile --no-loadscope-reorder tests $(NB) $(PYTEST_ARGS)"

# the notebooks alone, failing any that runs over its 3-minute budget (make test only reports the times)
bench-notebooks: setup
	GPUTRAIN_ENFORCE_NOTEBOOK_LIMIT=1 $(PY) -m pytest -c tests/pytest.ini --rootdir=. $(NB) $(PYTEST_ARGS)

# chapter 12's sweeps (base vs SFT, the synthetic-data curve, the forgetting ledger, the lr sweep) on one
# thread: 27 fine-tuning runs, 28 minutes on the 2-core Xeon while other work kept its load at 4-5;
# the chapter reads book/results/posttrain_cpu.json
record-posttrain: setup
	OMP_NUM_THREADS=1 $(PY) bench/record_posttrain.py --out book/results/posttrain_cpu.json

# chapter 13's experiments: GRPO from chapter 12's SFT model over seeds, an equal-compute SFT control, the
# loss-type lab, InstructGPT in miniature (reward model, PPO, DPO). One thread; about 25 minutes on the 2-core CPU.
# PARTS=grpo,control re-records some parts and keeps the rest of book/results/rewards_cpu.json
record-rewards: setup
	@start=$$(date +%s); OMP_NUM_THREADS=1 $(PY) bench/record_rewards.py --out book/results/rewards_cpu.json \
	  $(if $(PARTS),--parts $(PARTS)); echo "make record-rewards: $$(( $$(date +%s) - start )) s"

# chapter 12's speed table: gputrain sft against TRL's SFTTrainer (PEFT for LoRA), one thread, runs alternated;
# about 6-9 minutes on the 2-core CPU. Writes book/results/sft_vs_trl_cpu.json (SFT_OUT=... elsewhere)
SFT_OUT ?= book/results/sft_vs_trl_cpu.json
bench-sft: setup
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(PY) bench/sft_vs_trl.py --out $(SFT_OUT)

# chapter 13's speed table: one GRPO step (rollout and learning) of gputrain rl against TRL's GRPOTrainer, one
# thread, runs alternated; about 2-3 minutes on the 2-core CPU. Writes book/results/grpo_vs_trl_cpu.json (GRPO_OUT=...)
GRPO_OUT ?= book/results/grpo_vs_trl_cpu.json
bench-grpo: setup
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(PY) bench/grpo_vs_trl.py --out $(GRPO_OUT)

serve:
	@test -f _build/html/index.html || $(MAKE) book
	@echo "Serving http://localhost:$(PORT)  (Ctrl-C to stop)"
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

execute: setup
	$(PY) book/tools/execute.py $(NB)

clean:
	rm -rf _build book/_static/vendor

# chapter 14's IsoFLOP sweep, its prediction and the 10x run, on one thread (about half an hour on a quiet
# machine); rewrites book/results/scaling_cpu.json and prints its wall time
record-scaling: setup
	@start=$$(date +%s); OMP_NUM_THREADS=1 $(PY) bench/record_scaling.py; \
	  echo "make record-scaling: $$(( $$(date +%s) - start )) s"
