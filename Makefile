# vramd: `make` builds into build/, `make test` runs the tests, `make demo` runs the demo.
# Each installs the Debian packages it needs first (apt-get, with sudo when not root).

BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
WERROR ?= 0

DEB_PACKAGES := g++ cmake ninja-build pkg-config libboost1.74-dev nlohmann-json3-dev \
  libtomlplusplus-dev libsqlitecpp-dev libsqlite3-dev libspdlog-dev libfmt-dev libcli11-dev \
  libgtest-dev libgmock-dev googletest libbenchmark-dev \
  nodejs npm chromium prometheus libfaketime docker.io busybox-static libpq-dev postgresql ccache \
  python3-yaml podman
# nodejs + npm: the build fetches the dashboard's uPlot and the browser tests' playwright-core
# (pinned in package-lock.json files). chromium: the browser tests. prometheus: promtool checks
# /metrics. libfaketime: a test steps the daemon's wall clock. docker.io + busybox-static: the
# container tests (tests/docker/) start a private dockerd and import a busybox rootfs as their
# image; podman: the same tests over a private `podman system service` (ctest podman_e2e).
# libpq-dev: the PostgreSQL store; postgresql: its tests start a private server (initdb,
# postgres). python3-yaml: the check of the Kubernetes manifests. ccache: rebuilds in the several
# build folders (release, ASan, TSan, fuzz) and in CI's clean clones cost little. An npm that
# came with another nodejs package (NodeSource's provides it) counts.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build test test-asan test-tsan fuzz tidy demo bench clean config-doc format format-check install dist dist-check

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || \
	    { [ $$p = npm ] && command -v npm >/dev/null; } || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DVRAMD_WERROR=$(if $(filter 1,$(WERROR)),ON,OFF) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD)

# Ends with one line per skipped entry and why (tests/report/skips.py): a skip is no pass.
test: build
	cd $(BUILD) && { ctest --output-on-failure -j2 --timeout 300 --output-junit ctest-junit.xml; \
	  rc=$$?; python3 $(CURDIR)/tests/report/skips.py ctest-junit.xml; exit $$rc; }

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer (run in CI).
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVRAMD_SANITIZE=ON \
	  -DVRAMD_BENCH=OFF -DVRAMD_WERROR=$(if $(filter 1,$(WERROR)),ON,OFF) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j2 --timeout 600

# ThreadSanitizer over what runs on more than one thread: the daemon (its loop, sampler, worker
# and store threads; in-process in FaultE2E, and the TSan-built vramd binary in the e2e tests),
# the process runner, the proxy, the Docker client. Its own build directory; a race or a
# lock-order inversion fails the test (halt_on_error; the daemon's children inherit TSAN_OPTIONS).
TSAN_BUILD ?= build-tsan
TSAN_TESTS ?= FaultE2E|StoreFault|LeaseWriter|EventSink|SampleLoop|ServiceRuntime|ClusterLink|DaemonE2E|HistoryE2E|RequestLog|DiscoverE2E|LeaseE2E|SupervisorE2E|UnloadE2E|Proxy|Docker|FakeGpuState|torture_short
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DVRAMD_TSAN=ON -DVRAMD_BENCH=OFF \
	  -DVRAMD_WERROR=$(if $(filter 1,$(WERROR)),ON,OFF) $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) --target vramd_tests
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure -j2 --timeout 600 -R '$(TSAN_TESTS)'

# libFuzzer over every parser (tests/fuzz/README.md): FUZZ_SECONDS per target, clang only, in a
# build directory of its own. Needs clang and its sanitizer runtimes, installed here for it alone.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30
fuzz: DEB_PACKAGES += clang libclang-rt-14-dev
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DVRAMD_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD)
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# clang-tidy over src/ (not the tests) with the checked-in .clang-tidy, TIDY_JOBS files at a time
# (tests/tidy/tidy.mjs): each finding once, a count per check, exit 1 unless clean. Each file's
# result is cached under ~/.cache/vramd-tidy by its preprocessed text, as ccache does for the
# compiler: ~14 min cold on 2 shared cores, ~1 min when nothing changed.
TIDY_JOBS ?= 2
tidy: DEB_PACKAGES += clang-tidy
tidy: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) --target vramd_lib
	node tests/tidy/tidy.mjs $(BUILD) $(TIDY_JOBS)

# Only what the demo runs: vramd, the test GPU's library and the stand-in servers (not the tests).
demo: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) --target vramd nvidia-ml-fake fake-gpu-server
	$(BUILD)/vramd demo

# dist/: what a user downloads. vramd with every library but glibc linked in and the dashboard
# embedded, and beside it what `vramd demo` needs (the test GPU's library, the stand-in servers).
DIST_BUILD ?= build-dist
dist: deps
	cmake -S . -B $(DIST_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMD_DIST=ON \
	  -DVRAMD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(DIST_BUILD) --target vramd nvidia-ml-fake fake-gpu-server
	mkdir -p dist
	install -m 755 -s $(DIST_BUILD)/vramd $(DIST_BUILD)/fake-gpu-server dist/
	install -m 644 -s $(DIST_BUILD)/libnvidia-ml-fake.so dist/
	tests/dist/check-libs.sh dist

# Runs dist/ in a minimal Debian 12 root (debootstrap minbase; needs root and the network once,
# the root is cached in $(DIST_BUILD)/bookworm-root).
dist-check: dist
	tests/dist/check-bare-root.sh dist $(DIST_BUILD)/bookworm-root

bench: build
	bench/run.sh $(BUILD)

# docs/config.md's key tables, rendered from the parser's rows (src/core/config.cc).
config-doc: build
	VRAMD_WRITE_CONFIG_DOC=1 $(BUILD)/vramd_tests --gtest_filter='ConfigDoc.TheReferenceIsRenderedFromTheKeyRows'

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) $(DIST_BUILD) dist

# `make install`: the binary, the systemd unit and, unless one exists, the example config.
# DESTDIR stages everything under another root (packages, tests: no root needed). The unit goes to
# /etc/systemd/system, which systemd reads whatever PREFIX is; its ExecStart follows BINDIR.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR ?= /etc/systemd/system

install: build
	install -D -s -m 0755 $(BUILD)/vramd $(DESTDIR)$(BINDIR)/vramd
	sed -e 's|/usr/local/bin/vramd|$(BINDIR)/vramd|g' -e 's|/etc/vramd/|$(SYSCONFDIR)/vramd/|g' \
	  packaging/vramd.service > $(BUILD)/vramd.service
	install -D -m 0644 $(BUILD)/vramd.service $(DESTDIR)$(UNITDIR)/vramd.service
	@if [ -e "$(DESTDIR)$(SYSCONFDIR)/vramd/vramd.toml" ]; then \
	  echo "kept the existing $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.toml (example: packaging/vramd.toml)"; \
	else \
	  echo "install -D -m 0644 packaging/vramd.toml $(DESTDIR)$(SYSCONFDIR)/vramd/vramd.toml"; \
	  install -D -m 0644 packaging/vramd.toml "$(DESTDIR)$(SYSCONFDIR)/vramd/vramd.toml"; \
	fi
	@echo "Now: edit $(SYSCONFDIR)/vramd/vramd.toml, then: systemctl daemon-reload && systemctl enable --now vramd"

# Removes the binary and the unit; the config and the state directory (/var/lib/vramd) stay.
.PHONY: uninstall
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/vramd $(DESTDIR)$(UNITDIR)/vramd.service
	@echo "Kept $(SYSCONFDIR)/vramd and /var/lib/vramd. Run 'systemctl disable --now vramd' first" \
	  "if it was enabled, and 'systemctl daemon-reload' after."
