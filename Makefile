# Quick start:  make train   (trains odevit_tiny_cifar with timm's train.py, prints top-1)
#               make test    (all tests, including timm's own model tests on our models)
# Both create ./.venv and install the package into it on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CIFAR  ?= $(wildcard ../shared/data/cifar10)
CONFIG ?= train_configs/odevit_tiny_cifar10_quick.yaml
OUTPUT ?= output/train

ifeq ($(strip $(CIFAR)),)
DATA_ARGS := --dataset torch/cifar10 --dataset-download --data-dir data/cifar10 --val-split test
else
DATA_ARGS := --data-dir $(CIFAR) --train-split train --val-split test
endif

.PHONY: install train test bench docs

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python -m timm_odevit.train --config $(CONFIG) $(DATA_ARGS) --output $(OUTPUT) $(ARGS)

# one thread per test worker: two workers of two threads each on two cores run slower than one each
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=15 $(ARGS)

bench: $(STAMP)
	cd bench && for s in throughput solver_overhead memory_vs_steps model_table plots; do ../$(BIN)/python $$s.py || exit 1; done

# README.md, docs/results.md and bench/README.md from docs/templates/ and the result files (bench/results/, release/)
docs: $(STAMP)
	cd bench && ../$(BIN)/python plots.py
	$(BIN)/python docs/render.py
