# Quick start:  make demo   (apply profiles/cxl-inference.yaml to a simulated h100-cxl node)
#               make test   (the whole test suite, inside a read-only /sys,/proc namespace when root)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint man bench bench-placement clean

$(STAMP): pyproject.toml sim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./sim
	touch $@

demo: $(STAMP)
	$(BIN)/nodeagent sim reset h100-cxl
	$(BIN)/nodeagent --simulate h100-cxl plan profiles/cxl-inference.yaml
	$(BIN)/nodeagent --simulate h100-cxl apply --yes profiles/cxl-inference.yaml
	$(BIN)/nodeagent --simulate h100-cxl plan profiles/cxl-inference.yaml

# The suite on every core, then the real-kernel tier one guest at a time (scripts/test.sh); the slowest tests are
# listed: CI has a time budget (40 min of 90).
test: $(STAMP)
	$(BIN)/ruff check .
	scripts/test.sh $(BIN)/python $(PYTEST_ARGS)

# The quick loop while editing: unit and layer tests, and the simulator's tests but its three sweeps (the
# convergence presets and property, the serving goldens), on both cores with one file per worker; no slow-marked
# sweep, no real-kernel tier, no e2e, no Ansible. Measured at 3 min 34 s on the 2-core development VM (1,216 tests);
# it meets 4 minutes there. `make test` runs everything.
FAST_IGNORE = --ignore=tests/sim/test_converge_presets.py --ignore=tests/sim/test_converge_property.py \
	--ignore=tests/sim/test_serving.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m 'not realkernel and not slow' -x -q -p no:cacheprovider -n 2 --dist loadfile \
		tests/unit tests/arch tests/sim $(FAST_IGNORE) $(PYTEST_ARGS)

# The man pages in man/ (installed with the package), from the click commands; tests/unit/test_man_pages.py fails
# when they are stale.
man: $(STAMP)
	$(BIN)/python scripts/gen-man.py

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/run.py

# What tiering configurations do to a workload's pages on a real kernel (QEMU/TCG guest, ~35 min; see bench/placement).
bench-placement: $(STAMP)
	$(BIN)/python bench/placement/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# The Ansible example (ansible/examples): review with --check --diff, converge, then a run that changes nothing.
.PHONY: fleet-demo
fleet-demo: $(STAMP)
	$(BIN)/ansible-playbook -i ansible/examples/inventory.yml ansible/examples/site.yml --check --diff
	$(BIN)/ansible-playbook -i ansible/examples/inventory.yml ansible/examples/site.yml
	$(BIN)/ansible-playbook -i ansible/examples/inventory.yml ansible/examples/site.yml

# ansible-test sanity on the collection (needs PyPI for the sanity tools; see the script).
.PHONY: ansible-sanity
ansible-sanity: $(STAMP)
	VENV_BIN=$(BIN) scripts/ansible-sanity.sh

# The convergence property over the whole matrix (tests/sim/test_converge_property.py, 240 sequences, fixed seed):
# two processes, one per pair of kernels, so both cores work. `make test` runs the same test with a few sequences.
# Then one apply of every shipped profile on every preset, the large ones included (tests/sim/test_converge_presets.py;
# `make test` leaves out `stress`, about 6 minutes an apply).
.PHONY: converge-sweep
converge-sweep: $(STAMP)
	NODEAGENT_CONVERGE_SWEEP=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/sim/test_converge_presets.py -n 2
	NODEAGENT_HYPOTHESIS=sweep $(BIN)/python -m pytest -q -p no:cacheprovider tests/sim/test_converge_property.py \
		-k '5.15 or 6.1.0' & p1=$$!; \
	NODEAGENT_HYPOTHESIS=sweep $(BIN)/python -m pytest -q -p no:cacheprovider tests/sim/test_converge_property.py \
		-k '6.12 or 6.18' & p2=$$!; \
	wait $$p1; r1=$$?; wait $$p2; r2=$$?; test $$r1 -eq 0 -a $$r2 -eq 0

# monitoring/ is where the alert rules and the dashboard are edited; the package ships a copy (nodeagent/monitoring,
# printed by `nodeagent metrics rules|dashboard`) that a test keeps equal.
.PHONY: monitoring
monitoring:
	cp monitoring/alerts.yaml monitoring/dashboard.json nodeagent/monitoring/

# The moving-window (KV cache) placement benchmark: every envelope point x start mode x configuration x 2 runs
# (QEMU/TCG guest, ~2 min a run; see bench/placement). POINTS=mid,burst CONFIGS=nodeagent narrow it;
# CANDIDATE=my.yaml also runs nodeagent with that profile, alternating with the others run by run.
POINTS ?= mid,wide,few,burst,slow
CONFIGS ?= baseline,tpp,damo-mem-tier,nodeagent
CANDIDATE ?=
bench-placement-kv: $(STAMP)
	$(BIN)/python bench/placement/run.py --workload kv --points $(POINTS) --configs $(CONFIGS) \
		$(if $(CANDIDATE),--candidate $(CANDIDATE))

# Real-kernel boots kept out of `make test` (each ~2-3 min): the one-bare-memdev CXL guest (layout cxl-1md), whose
# captures `make test` replays on the simulator, and MGLRU's min_ttl_ms killing on a full CXL node. NODEAGENT_RK_CAPTURE=1 rewrites tests/realkernel/captured.
.PHONY: realkernel-extra
realkernel-extra: $(STAMP)
	NODEAGENT_RK_EXTRA=1 scripts/readonly-kernel-ns.sh $(BIN)/python -m pytest -q -p no:cacheprovider -m realkernel \
		tests/realkernel/test_cxl_one_memdev.py tests/realkernel/test_cxl_maru_part.py \
		tests/realkernel/test_min_ttl_oom.py $(PYTEST_ARGS)

# The exhaustive fault sweep (tests/e2e/test_faults_*.py; `make test` runs one signal before each kind of write
# of a small-block node, 50 sampled h100-cxl points, an errno at every kind of write): every signal (KILL, TERM, INT)
# before every write of the small node, a signal before every write of an h100-cxl apply, every errno at every
# write, a kill after every step of a CXL region's creation; each followed by the next apply. Hours on 2 cores.
.PHONY: fault-sweep
fault-sweep: $(STAMP) kill-sweep
	NODEAGENT_FAULT_SWEEP=full scripts/readonly-kernel-ns.sh $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/e2e/test_faults_signals.py tests/e2e/test_faults_errors.py tests/sim/test_crash_safe.py

# The kill sweep (tests/e2e/kill_sweep.py; `make test` runs 6 apply and 3 revert kills): SIGKILL of an apply or a
# revert at a random moment (seeded: SEED=N repeats a sweep; the seed is printed), on h100-cxl-memdevs, h100-cxl and
# qemu-3node, each followed by an apply that must converge and an empty plan (a revert also by a revert that gives
# back the node as booted). Prints the counts; about 30 minutes on 2 cores. JOBS=N runs N at once (the same runs).
.PHONY: kill-sweep
kill-sweep: $(STAMP)
	scripts/readonly-kernel-ns.sh $(BIN)/python -m tests.e2e.kill_sweep --applies 108 --reverts 56 $(if $(SEED),--seed $(SEED)) \
		$(if $(JOBS),--jobs $(JOBS))
