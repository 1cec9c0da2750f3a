# Quick start:  make train   (trains odevit_tiny_cifar with timm's train.py, prints its test top-1)
#               make test    (all tests, including timm's own model tests on our models)
# Both create ./.venv and install the package into it on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CIFAR  ?= $(wildcard ../shared/data/cifar10)
CONFIG ?= train_configs/odevit_tiny_cifar10_quick.yaml
OUTPUT ?= output/train
RUN    ?= quickstart

ifeq ($(strip $(CIFAR)),)
DATA_ARGS := --dataset torch/cifar10 --dataset-download --data-dir data/cifar10
TEST_ARGS := --dataset torch/cifar10 --dataset-download --data-dir data/cifar10 --split test
else
DATA_ARGS := --data-dir $(CIFAR) --train-split train
TEST_ARGS := --data-dir $(CIFAR) --split test
endif

.PHONY: install train test bench docs

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# no validation split: nothing is selected on the test images (the last epoch's weights are kept), which are then
# scored once with timm's validate.py
train: $(STAMP)
	$(BIN)/python -m timm_odevit.train --config $(CONFIG) $(DATA_ARGS) --val-split '' --output $(OUTPUT) \
		--experiment $(RUN) $(ARGS)
	$(BIN)/python -m timm_odevit.train --validate $(TEST_ARGS) --checkpoint $(OUTPUT)/$(RUN)/last.pth.tar \
		$$($(BIN)/python -m tools.validate_args $(OUTPUT)/$(RUN)/args.yaml)
	@echo "make train: the top-1 above is on the CIFAR-10 test split, scored once with the last epoch's weights" \
		"(no checkpoint was selected on it; run folder $(OUTPUT)/$(RUN))"

# one thread per test worker: two workers of two threads each on two cores run slower than one each
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --durations=15 $(ARGS)

bench: $(STAMP)
	cd bench && for s in throughput solver_overhead memory_vs_steps model_table plots; do ../$(BIN)/python $$s.py || exit 1; done

# README.md, docs/results.md and bench/README.md from docs/templates/ and the result files (bench/results/, release/)
docs: $(STAMP)
	cd bench && ../$(BIN)/python plots.py
	$(BIN)/python docs/render.py
