# pyspark-s2s developer entry points.
#
#   make demo    set up .venv if needed, then run the Spark streaming round trip through the reference server
#   make test    set up .venv (and chromium + chromium-driver, for the queue page test) if needed, lint (ruff, mypy),
#                run the whole test suite (pyspark 4.3.0), then the Spark tests that matter again on the oldest
#                supported pyspark line (.venv-spark-oldest)
#   make bench   set up .venv if needed, then run the client and Spark read benchmarks
#   make dist    set up .venv if needed, then build the sdist and the wheel into dist/ (python -m build)
#   make docs    set up .venv if needed, then build the docs site into build/site (mkdocs build --strict)
#   make clean   remove .venv and build/test caches
#
# .venv is (re)installed only when setup.cfg or pyproject.toml is newer than its stamp file,
# so a second run starts at once. pip uses whatever indexes are configured on the machine.

SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.s2s-installed
JAVA := $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)
PYTEST_ARGS ?=
S2S_PYTEST_STATUS ?=

# The oldest supported pyspark line, in a venv of its own: the source, the sink, a driver restart
# and the per-line behaviour (docs/spark.md, "Spark lines"). Two tests of Spark's admission control
# (several AvailableNow micro-batches, a cap per micro-batch under AvailableNow) are left out there:
# before 4.2 Spark runs AvailableNow as one micro-batch, which test_spark_lines.py asserts instead.
# pyspark 4.0's own collect() sockets are closed by the garbage collector, so that run does not turn
# ResourceWarnings into errors (the main run does).
OLDEST_PYSPARK ?= 4.0.5
VENV_OLDEST := .venv-spark-oldest
VPY_OLDEST := $(VENV_OLDEST)/bin/python
STAMP_OLDEST := $(VENV_OLDEST)/.s2s-installed-$(OLDEST_PYSPARK)
OLDEST_TESTS := tests/spark/test_source_stream.py tests/spark/test_sink.py tests/spark/test_source_restart.py \
	tests/spark/test_spark_lines.py
OLDEST_ARGS := -p no:unraisableexception -W ignore::ResourceWarning \
	--deselect tests/spark/test_source_stream.py::test_admission_control_caps_each_micro_batch \
	--deselect tests/spark/test_source_stream.py::test_available_now_ends_while_nifi_keeps_adding

DURATIONS ?= --durations=25 --durations-min=5

.PHONY: demo test test-oldest lint bench dist docs clean venv venv-oldest check-python check-java browser

demo: check-java venv
	$(VPY) -m pyspark_s2s.spark.demo

# the slowest tests are listed after the run (CI is kept under 30 minutes: docs/development.md);
# pytest's exit status 5 ("no tests collected") is a failure here, said in one line;
# S2S_PYTEST_STATUS (optional) names a file that receives pytest's own exit status (.ci/run uses it).
test: check-java browser venv venv-oldest lint
	@echo "$(VPY) -m pytest -q $(DURATIONS) $(PYTEST_ARGS)"; \
	$(VPY) -m pytest -q $(DURATIONS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 0 ] && [ -z "$(PYTEST_ARGS)" ]; then \
		echo "== the Spark tests on pyspark $(OLDEST_PYSPARK), the oldest supported line"; \
		echo "$(VPY_OLDEST) -m pytest -q $(OLDEST_ARGS) $(OLDEST_TESTS)"; \
		$(VPY_OLDEST) -m pytest -q $(OLDEST_ARGS) $(OLDEST_TESTS); rc=$$?; \
	fi; \
	if [ -n "$(S2S_PYTEST_STATUS)" ]; then echo $$rc > "$(S2S_PYTEST_STATUS)"; fi; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit status 5); that counts as a failure" >&2; fi; \
	exit $$rc

# ruff over the code and the tests; mypy over the package (strict on the protocol core), then bench,
# faults and tests (setup.cfg [mypy]: unannotated functions' bodies are checked too). tests/ is not a
# package (pytest puts each of its directories on sys.path), so each directory is a mypy run of its
# own: their conftest.py files would clash as one module. The pinned versions come with the dev extra.
lint: venv
	$(VPY) -m ruff check pyspark_s2s bench faults integration tests mkdocs_hooks.py
	$(VPY) -m mypy pyspark_s2s
	$(VPY) -m mypy bench faults tests/*.py
	@for d in tests/*/; do \
		ls $$d*.py >/dev/null 2>&1 || continue; \
		echo "$(VPY) -m mypy $$d"; $(VPY) -m mypy $$d || exit 1; \
	done

# the Spark tests on the oldest supported line only
test-oldest: check-java venv-oldest
	$(VPY_OLDEST) -m pytest -q $(OLDEST_ARGS) $(OLDEST_TESTS)

bench: check-java venv
	$(VPY) -m bench.client
	$(VPY) -m bench.spark_read

# the sdist, and the wheel built from it (tests/test_wheel.py installs such a wheel into a fresh venv)
dist: venv
	rm -rf dist
	$(VPY) -m build --outdir dist .

# the docs site (mkdocs.yml, mkdocs_hooks.py) into build/site; --strict: a link or heading fragment that
# does not resolve, or a page missing from the navigation, fails the build (tests/test_docs_site.py
# runs the same build in the suite). NO_MKDOCS_2_WARNING silences the theme's end-of-life banner.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VPY) -m mkdocs build --strict

venv: $(STAMP)

venv-oldest: $(STAMP_OLDEST)

# editable_mode=compat puts the checkout itself on sys.path (a .pth line): Spark finds data
# sources by listing the top-level modules named pyspark_* on sys.path, which the default
# editable mode (an import hook) hides from it.
$(STAMP): setup.cfg pyproject.toml | check-python
	@if [ ! -x $(VPY) ] || ! $(VPY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "creating $(VENV) with $$($(PYTHON) --version 2>&1)"; \
		rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); \
	fi
	$(VPY) -m pip install -q -e '.[test,dev,docs]' --config-settings editable_mode=compat
	@touch $@

# the package as in .venv, but next to pyspark $(OLDEST_PYSPARK) and the test tools only
$(STAMP_OLDEST): setup.cfg pyproject.toml | check-python
	@if [ ! -x $(VPY_OLDEST) ] || ! $(VPY_OLDEST) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "creating $(VENV_OLDEST) with $$($(PYTHON) --version 2>&1)"; \
		rm -rf $(VENV_OLDEST) && $(PYTHON) -m venv $(VENV_OLDEST); \
	fi
	$(VPY_OLDEST) -m pip install -q -e '.[test-oldest]' 'pyspark==$(OLDEST_PYSPARK)' --config-settings editable_mode=compat
	@rm -f $(VENV_OLDEST)/.s2s-installed-*
	@touch $@

# The queue page's browser test (tests/server/test_queue_page.py) drives Debian's chromium through
# chromium-driver with Selenium (the test extra). Silent when both are there; missing, they are
# installed with apt-get as root (a fresh Debian machine, CI), otherwise the command is named and the
# test skips itself (it fails instead under CI=true).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing chromium and chromium-driver (apt-get) for the queue page's browser test"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null \
				|| { echo "error: apt-get could not install chromium and chromium-driver" >&2; exit 1; }; \
		else \
			echo "warning: chromium or chromium-driver is missing (as root: apt-get update && apt-get install -y chromium chromium-driver); the queue page's browser test will be skipped" >&2; \
		fi; \
	fi

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "error: Python 3.11 or newer is required; '$(PYTHON)' is $$($(PYTHON) -c 'import sys; print("Python", sys.version.split()[0])' 2>/dev/null || echo "not runnable") (set PYTHON=/path/to/python3.11+)" >&2; \
		exit 1; }

# Spark (the coming Spark layer and its tests) needs a Java 17+ runtime.
check-java:
	@v=$$($(JAVA) -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1); \
	if [ -z "$$v" ]; then \
		echo "error: Java 17 or newer is required (Spark needs it) but '$(JAVA)' was not found; install a JDK/JRE 17+ (e.g. openjdk-17-jre-headless) or set JAVA_HOME" >&2; \
		exit 1; \
	fi; \
	major=$${v%%.*}; \
	if [ "$$major" = 1 ]; then major=$$(echo "$$v" | cut -d. -f2); fi; \
	major=$${major%%[!0-9]*}; \
	if [ -z "$$major" ] || [ "$$major" -lt 17 ]; then \
		echo "error: Java 17 or newer is required (Spark needs it); '$(JAVA)' is Java $$v; install a JDK/JRE 17+ or point JAVA_HOME at one" >&2; \
		exit 1; \
	fi

clean:
	rm -rf $(VENV) $(VENV_OLDEST) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
