# Fresh machine: `make demo` (main job, embedded device models) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
KVBED  := $(VENV)/bin/kvbed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.cache/numba
DEMO_DIR ?= results/demo

STUDIES ?= kv-hints-fdp what-decides-death how-many-ruhs fdp-vs-zns faults-contracts practical-hints

.PHONY: demo test test-fast test-engines host-setup venv bench studies docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# The engines' own KV event code (vLLM, SGLang wheels with --no-deps: no torch) for the capture tests
# (tests/kvreplay/capture/test_engines.py); pins in tests/support/engine-requirements.txt.
$(VENV)/.engines: tests/support/engine-requirements.txt $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps -r tests/support/engine-requirements.txt
	touch $@

test-engines: $(VENV)/.engines

# The main job on the embedded default (no VM, no downloads): a sample trace replayed with
# no hints and with oracle lifetime hints on the default FDP model, then the comparison.
demo: venv
	$(KVBED) trace synth -o $(DEMO_DIR)/sample.parquet
	$(KVBED) replay $(DEMO_DIR)/sample.parquet --device fdp --hints none -o $(DEMO_DIR)/none
	$(KVBED) replay $(DEMO_DIR)/sample.parquet --device fdp --hints oracle -o $(DEMO_DIR)/oracle
	$(KVBED) report $(DEMO_DIR)/none $(DEMO_DIR)/oracle

# System packages (QEMU 10 from bookworm-backports, image tools), then every test.
host-setup:
	scripts/setup_host.sh

test: host-setup venv test-engines
	KVBED_REQUIRE_VM=1 $(PY) -m pytest -q

# Everything but the VM suite (no root, no QEMU needed).
test-fast: venv test-engines
	$(PY) -m pytest -q -m "not vm"

# The example studies (studies/*.toml, 1-2 minutes each on 2 cores), then from them docs/findings.md, the
# README's findings headline, docs/gallery.md and its images (docs/gallery/).
studies: venv
	for s in $(STUDIES); do $(KVBED) study run studies/$$s.toml -o results/studies/$$s -q || exit 1; done
	$(PY) scripts/studies_docs.py $(addprefix results/studies/,$(STUDIES))

# The docs site (mkdocs.yml, Material) into site/; tests/test_docs_site.py builds it with --strict too.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site

bench: venv
	for b in scripts/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .cache results/demo site
