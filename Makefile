# squall: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
RELEASE ?= trixie
PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest
export SQUALL_RELEASE := $(RELEASE)
.DEFAULT_GOAL := help

# A second Slurm release: build its node image (squall's packages built against its
# headers and installed) and run the release smoke test and the package checks on it.
test-release: core
	bash docker/build-images.sh $(RELEASE)
	$(PYTEST) tests/integration/test_release_smoke.py tests/integration/test_packages.py

# mypy --strict ([tool.mypy] in pyproject.toml) on all of python/squall: a wrong call
# fails lint.
MYPY_CLEAN := python/squall python/squall_steps spank/core/cffi_build.py

.PHONY: fuzz asan dist dist-check packages test-release deps help core lint unit registry integration test demo images cluster-up cluster-down scale-up scale-down plugin bench clean

help:
	@echo "make demo          build an image, write the job, run it on two nodes, kill one, watch it resume"
	@echo "make test          lint + unit + registry + integration tests (brings the mini cluster up), with coverage"
	@echo "make cluster-up    start the mini Slurm cluster (RELEASE=trixie|bookworm|sid)"
	@echo "make cluster-down  stop it and remove every container, network and volume"
	@echo "make scale-up NODES=128  many light nodes beside it, /fsx on GlusterFS (make scale-down)"
	@echo "make packages      Debian packages (and RPMs where rpmbuild exists) in dist/"

# Debian packages and squall itself (editable), when something is missing.
deps:
	@bash .ci/install-deps.sh

# The C core compiled into squall._core (cffi), next to the Python sources.
core: deps
	SQUALL_WERROR=1 $(PYTHON) setup.py -q build_ext --inplace

plugin:
	$(MAKE) -C spank

# The C core (squall._core, built into build/asan/ beside a copy of the package) and the
# plugin and hooks built with AddressSanitizer + UBSan, and the unit tests run on that core
# (libasan preloaded into Python, whose own leaks are not ours: detect_leaks=0). The hooks
# the tests build themselves get the same flags (SQUALL_TEST_CFLAGS). test_mksbatch_input.py
# and test_sqshbuild_inspect.py (pure Python) run children under `ulimit -v` (RLIMIT_AS),
# where ASan cannot map its shadow memory; `make test` runs them.
ASAN_DESELECT :=
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_PRELOAD = $(shell gcc -print-file-name=libasan.so) $(shell gcc -print-file-name=libubsan.so)
asan: deps
	rm -rf build/asan && mkdir -p build/asan && cp -a python/squall build/asan/
	rm -f build/asan/squall/_core*.so build/asan/squall/_core.c
	CFLAGS="$(ASAN_FLAGS) -g" LDFLAGS="$(ASAN_FLAGS)" \
		$(PYTHON) setup.py -q build_ext --build-lib build/asan --build-temp build/asan/tmp
	$(MAKE) -C spank BUILD=build/asan CFLAGS="$(ASAN_FLAGS) -g" LDFLAGS="$(ASAN_FLAGS)" all
	LD_PRELOAD="$(ASAN_PRELOAD)" PYTHONPATH=$(CURDIR)/build/asan \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=86 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87 \
		SQUALL_TEST_CFLAGS="$(ASAN_FLAGS) -Wno-error" $(PYTEST) -p no:cacheprovider -n $(PYTEST_WORKERS) tests/unit \
		--ignore=tests/unit/test_mksbatch_input.py --ignore=tests/unit/test_sqshbuild_inspect.py \
		$(ASAN_DESELECT) $(ASAN_PYTEST_ARGS)
	@# the tests above imported the sanitized core, not the editable install's
	LD_PRELOAD="$(ASAN_PRELOAD)" PYTHONPATH=$(CURDIR)/build/asan ASAN_OPTIONS=detect_leaks=0 \
		$(PYTHON) -c 'import squall._core as c; \
		assert c.__file__.startswith("$(CURDIR)/build/asan/"), c.__file__'

# libFuzzer targets for every C core parser (spank/fuzz/, clang), each run FUZZ_SECONDS
# seconds from its seed corpus; fails on any crash, leak or sanitizer report.
FUZZ_SECONDS ?= 10
fuzz:
	$(MAKE) -C spank/fuzz run FUZZ_SECONDS=$(FUZZ_SECONDS)

# No function above cyclomatic complexity 25 anywhere: lizard over the C (core, plugin,
# hooks, tests and fuzz targets) and over the Python (it counts `and`/`or` and a
# comprehension's `if`, which mccabe does not), and ruff's mccabe (C901; max-complexity
# in pyproject.toml) over every Python file in the tree. Split a function that crosses
# it, never raise it.
COMPLEXITY_MAX := 25
LIZARD_PYTHON := python tests bench sbatch docker
lint: core
	$(PYTHON) -m ruff check python tests bench
	$(PYTHON) -m lizard --languages c --CCN $(COMPLEXITY_MAX) --warnings_only spank
	$(PYTHON) -m lizard --languages python --CCN $(COMPLEXITY_MAX) --warnings_only $(LIZARD_PYTHON)
	$(PYTHON) -m ruff check --select C901 .
	$(PYTHON) -m mypy $(MYPY_CLEAN)
	$(MAKE) -C spank check-build
	$(MAKE) -C spank analyze
	@# no two plugin files call each other, through any chain (docs/architecture.md)
	$(PYTHON) spank/callmap.py cycles

# Coverage of squall ([tool.coverage] in pyproject.toml): the pytest process and every Python
# process it starts (coverage's .pth, patch = subprocess), combined and reported, with the
# 25 slowest tests. `make test` fails under fail_under (the unit + registry level: the
# integration tier's Python runs inside the cluster's nodes, where nothing is measured);
# `make unit` under UNIT_FAIL_UNDER, the unit tier's own level. The data directory is
# world-writable: some tests run squall as other users.
COVERAGE := $(PYTHON) -m coverage
COVERAGE_DIR := build/coverage
# the unit tier alone measured 76.0 % on 2026-12-01
UNIT_FAIL_UNDER := 75
# $(1) runs in PYTEST_WORKERS processes (pytest-xdist): the unit and registry tiers spend
# most of their time waiting on runtimes, subprocesses and sockets, not on a CPU. $(3), the
# cluster tier, runs after it on CLUSTERS mini clusters side by side, one worker each, a
# test at a time on each (whole files: --dist loadfile, the slowest first): the first is
# the one `make demo` left (or the one the tier brings up), the others the tier brings up
# itself and removes at the end (tests/integration/conftest.py, SQUALL_REQUIRE_RUNNING_CLUSTER
# binds the first only). Most of the cluster tier's time is spent waiting on Slurm's
# timers, not on a CPU: two clusters fit two cores. CLUSTERS=1 runs it on one.
# Every tier runs even when an earlier one failed, so that CI shows every failure at once.
PYTEST_WORKERS ?= 4
# Each test's time goes to build/junit/cluster.xml (.ci/module-times.py sums it by module).
CLUSTERS ?= 2
CLUSTER_TIER := -n $(CLUSTERS) --dist loadfile --no-loadscope-reorder \
	--junitxml=build/junit/cluster.xml tests/integration
define covered
	rm -rf $(COVERAGE_DIR) && mkdir -p -m 1777 $(COVERAGE_DIR)
	rc=0; \
	$(COVERAGE) run -m pytest --durations=25 -n $(PYTEST_WORKERS) $(1) || rc=1; \
	$(if $(3),$(COVERAGE) run -m pytest --durations=25 $(3) || rc=1;) \
	$(COVERAGE) combine -q && $(COVERAGE) report $(2) || rc=1; \
	exit $$rc
endef

unit: core
	$(call covered,tests/unit,--fail-under=$(UNIT_FAIL_UNDER))

registry: core
	$(PYTEST) tests/registry

images:
	bash docker/build-images.sh $(RELEASE)

cluster-up: images
	bash docker/cluster.sh up

cluster-down:
	bash docker/cluster.sh down

# The scale cluster: NODES light Slurm nodes in one container beside the mini cluster,
# /fsx on GlusterFS (docs/cluster.md, "Many nodes on one machine").
NODES ?= 16
scale-up: cluster-up
	bash docker/scale/scale.sh up $(NODES)

scale-down:
	bash docker/scale/scale.sh down

integration: core images
	$(PYTEST) $(CLUSTER_TIER)

test: lint core images
	$(call covered,tests/unit tests/registry,,$(CLUSTER_TIER))

demo: core images
	bash docker/demo.sh

# Benchmarks write their tables to bench/results/ (run them on a quiet machine).
bench: core images cluster-up
	$(PYTHON) bench/bench_container_start.py
	$(PYTHON) bench/bench_sqshbuild.py

# The sdist and wheel in dist/ (python -m build); dist-check installs the sdist in a clean
# venv and checks the commands and what is installed (CI runs it).
dist:
	$(PYTHON) -m build --outdir dist .

dist-check:
	PYTHON=$(PYTHON) bash .ci/check-dist.sh

# Debian packages (debhelper) in dist/, built against this machine's Slurm headers, and
# the RPMs (packaging/squall.spec) where rpmbuild exists. Node images build their own.
packages:
	bash packaging/build-debs.sh dist
	if command -v rpmbuild >/dev/null; then bash packaging/build-rpms.sh dist; fi

clean:
	rm -f python/squall/_core*.so python/squall/_core.c
	$(MAKE) -C spank clean
