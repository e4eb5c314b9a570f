# jaxside: `make demo` sets up and annotates the bundled Llama sample; `make test` sets up and runs the tests.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Other interpreters the frame recorder is tested on (plain Python, no torch), when present.
EXTRA_PYTHONS := $(foreach v,3.12 3.13,$(firstword $(wildcard $(HOME)/.pyenv/versions/$(v).*/bin/python)))

.PHONY: setup demo test test-frames browser lint bench zoo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch 2.13.0 is pinned: here it is a local CPU wheel; any other version pulls GBs of CUDA.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/annotate samples/llama_model.py

test: setup test-frames browser
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Debian's Chromium and its driver run the HTML views in tests; installed when we may (root with apt).
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null || { [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null && apt-get update -qq \
		&& apt-get install -y -qq chromium chromium-driver >/dev/null; } \
		|| echo "chromium or chromedriver is not installed: the HTML view tests will be skipped"

# The frame recorder's tests under each extra interpreter, in a small venv of its own.
test-frames:
	@for py in $(EXTRA_PYTHONS); do \
		v=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
		venv=.venv-frames-$$v; \
		[ -x $$venv/bin/pytest ] || { $$py -m venv $$venv && $$venv/bin/pip install --quiet pytest bytecode; }; \
		echo "frame recorder on Python $$v:"; \
		PYTHONPATH=. $$venv/bin/pytest -q -p no:cacheprovider tests/test_frames.py || exit 1; \
	done

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) -m benchmarks

# Third-party models (transformers, timm, x-transformers) through annotate: one table, under 30 minutes.
# timm and x-transformers declare torch (and timm torchvision) as dependencies: installed without them.
$(VENV)/.zoo: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[zoo]'
	$(PY) -m pip install --quiet --no-deps 'timm>=1.0,<2' 'x-transformers>=2.3,<3' 'torch-einops-utils>=0.2'
	touch $@

zoo: $(VENV)/.zoo
	$(PY) -m benchmarks.zoo

clean:
	rm -rf $(VENV) .venv-frames-* build *.egg-info
