# jaxside: `make demo` installs what annotate needs and annotates the bundled Llama sample; `make test`
# installs the test extras too and runs the tests.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Python 3.12 runs the whole suite with real torch (sys.monitoring is the recorder there); 3.13 the
# frame recorder's tests (plain Python, no torch). pyenv's first, else one on PATH.
find_python = $(firstword $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python) $(shell command -v python$(1)))
PYTHON312 ?= $(call find_python,3.12)
PYTHON313 ?= $(call find_python,3.13)
VENV312 := .venv-3.12
# Said loudly; under CI (`CI` set) a missing interpreter fails the run.
missing = { printf '\n*** %s ***\n\n' "$(1)" >&2; [ -z "$$CI" ] || exit 1; }

.PHONY: setup setup-demo demo test test-3.11 test-3.12 test-frames browser lint typecheck mutate bench screenshots zoo \
	review-zoo clean

# What `annotate` itself needs (torch, jax, torchax, ...): all `make demo` installs.
$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch 2.13.0 is pinned: here it is a local CPU wheel; any other version pulls GBs of CUDA.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e .
	touch $@

# And what the tests need: the [test] extra (pytest, selenium, ipython, flax, equinox, transformers...).
$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -m pip install --quiet -e '.[test]'
	# timm for tests/test_instances.py (resnet18's blocks); without its torch/torchvision deps.
	$(PY) -m pip install --quiet --no-deps 'timm>=1.0,<2'
	touch $@

setup-demo: $(VENV)/.runtime
setup: $(VENV)/.installed

demo: setup-demo
	$(VENV)/bin/annotate samples/llama_model.py

# Lint, the type checker, the whole suite on 3.11, what depends on the interpreter on 3.12 (each
# with torch), the frame recorder on 3.13.
test: lint typecheck browser test-3.11 test-3.12 test-frames

test-3.11: setup browser
	$(PY) -m pytest -q $(PYTEST_ARGS)

# On 3.12, tests marked one_interpreter (rules, the op catalog, the zoo but its Llama, streams, the
# install) are left out: they do not depend on the interpreter and ran on 3.11.
MARKS312 ?= not one_interpreter

# torch 2.13.0's cp312 wheel (with its CUDA libraries, about 4.7 GB; it runs on the CPU).
$(VENV312)/.installed: pyproject.toml
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/python -m pip install --quiet --upgrade pip
	$(VENV312)/bin/python -m pip install --quiet torch==2.13.0
	$(VENV312)/bin/python -m pip install --quiet -e '.[test]'
	$(VENV312)/bin/python -m pip install --quiet --no-deps 'timm>=1.0,<2'
	touch $@

test-3.12: browser
	@if [ -z "$(PYTHON312)" ]; then \
		$(call missing,NO PYTHON 3.12: the suite did NOT run on 3.12 (sys.monitoring) - install python3.12); \
	else \
		$(MAKE) --no-print-directory $(VENV312)/.installed \
		&& echo "the suite on Python 3.12 (what depends on the interpreter; MARKS312= for all of it):" \
		&& $(VENV312)/bin/python -m pytest -q -p no:cacheprovider $(if $(MARKS312),-m "$(MARKS312)") $(PYTEST_ARGS); \
	fi

# Debian's Chromium and its driver run the HTML views in tests; installed when we may (root with apt).
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null || { [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null && apt-get update -qq \
		&& apt-get install -y -qq chromium chromium-driver >/dev/null; } \
		|| echo "chromium or chromedriver is not installed: the HTML view tests will be skipped"

# The frame recorder's tests on Python 3.13, in a small venv of its own (no torch).
test-frames:
	@if [ -z "$(PYTHON313)" ]; then \
		$(call missing,NO PYTHON 3.13: the frame recorder was NOT tested on 3.13 - install python3.13); \
	else \
		venv=.venv-frames-3.13; \
		[ -x $$venv/bin/pytest ] || { $(PYTHON313) -m venv $$venv && $$venv/bin/pip install --quiet pytest bytecode; }; \
		echo "frame recorder on Python 3.13:"; \
		PYTHONPATH=. $$venv/bin/pytest -q -p no:cacheprovider tests/test_frames.py; \
	fi

# Mutation testing, not part of `make test`: mutmut over what [tool.mutmut] in pyproject.toml
# names (docs/testing.md). mutmut names a mutant after its file's path and the tests import
# jaxside.render..., so it runs in a copy laid out as installed (build/mutate/jaxside/render/...);
# its results (build/mutate/mutants/) are kept, so a second run re-tests only what changed.
MUTATE := build/mutate
mutate: setup
	$(PY) -m pip install --quiet mutmut==3.8.1
	rm -rf $(MUTATE)/jaxside $(MUTATE)/tests && mkdir -p $(MUTATE)
	cp -r jaxside $(MUTATE)/ && cp -r annotate tracing render $(MUTATE)/jaxside/
	cp -r tests samples benchmarks docs pyproject.toml $(MUTATE)/
	cd $(MUTATE) && $(abspath $(VENV))/bin/mutmut run $(MUTANTS) && $(abspath $(VENV))/bin/mutmut results

lint: setup
	$(VENV)/bin/ruff check .

# mypy, strict on render/ and tracing/ ([tool.mypy] in pyproject.toml). The folders are the packages
# jaxside.render and jaxside.tracing only as installed (package-dir), which no checker follows:
# build/typecheck/jaxside/ links them in that layout, and mypy reads them there (docs/testing.md).
TYPECHECK := build/typecheck
typecheck: setup
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/jaxside
	ln -s $(abspath jaxside/__init__.py) $(abspath jaxside/py.typed) $(TYPECHECK)/jaxside/
	ln -s $(abspath annotate) $(abspath tracing) $(abspath render) $(TYPECHECK)/jaxside/
	$(PY) -m mypy

# The HTML view's screenshots in docs/ (the Llama sample; transformers' Llama, light and dark).
screenshots: setup browser
	PYTHONPATH=tests $(VENV)/bin/python tests/screenshots.py

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

# Published Flax ports (transformers 4.57's GPT-2 and Llama) through annotate review, in a venv of
# their own: transformers 5 dropped Flax. torch 2.13.0 pinned first (any other pulls GBs of CUDA).
REVIEW_ZOO := .venv-review-zoo
$(REVIEW_ZOO)/.installed: pyproject.toml
	$(PYTHON) -m venv $(REVIEW_ZOO)
	$(REVIEW_ZOO)/bin/python -m pip install --quiet --upgrade pip
	$(REVIEW_ZOO)/bin/python -m pip install --quiet torch==2.13.0
	$(REVIEW_ZOO)/bin/python -m pip install --quiet -e . 'transformers==4.57.*' 'flax>=0.12,<0.13'
	touch $@

review-zoo: $(REVIEW_ZOO)/.installed
	$(REVIEW_ZOO)/bin/python -m benchmarks.review_zoo

clean:
	rm -rf $(VENV) $(VENV312) $(REVIEW_ZOO) .venv-frames-* mutants build *.egg-info
