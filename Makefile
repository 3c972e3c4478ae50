# SPDX-License-Identifier: Apache-2.0
# roomd: the two commands a new machine needs.
#   make run    install the build packages that are missing (make deps), build (release: no
#               test hooks), start roomd on SQLite
#   make test   install the build and test packages (make test-deps), build with ASan+UBSan,
#               start mariadb/redis/nats, run every test, then each fuzzer 10 s from its seeds
#   make fuzz   build the libFuzzer harnesses (clang) and run each FUZZ_SECONDS (60) from fuzz/corpus
#   make deps       the Debian packages a build needs (scripts/deps.sh build; root or sudo)
#   make test-deps  those and the test servers, browser, packaging tools, Go, npm test tooling
#   make install DESTDIR= PREFIX=   only installs (no package manager): compiles what is not
#                  built yet (release, into $(BUILD)), then installs under $(DESTDIR)$(PREFIX):
#                  binaries in sbin/, /etc/roomd/roomd.yaml, share/roomd/roomd.env.example, the systemd
#                  unit, logrotate, man pages roomd(8) roomctl(8); run `make deps` once before.
#   make deb    the Debian packages roomd + roomd-tools into ../ (dpkg-buildpackage -us -uc -b)
# Other targets: build, compile (build without deps), asan, bench, format, check-config, clean.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS ?= 2
WERROR ?= OFF
CONFIG ?= configs/local.yaml
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=
CMAKE_ARGS ?=

.PHONY: all deps test-deps build compile asan fuzz-build fuzz run test bench format check-config clean install deb

all: build

deps:
	@scripts/deps.sh build

test-deps:
	@scripts/deps.sh test

build: deps
	$(MAKE) compile

# configure + compile the release build; no package manager (install and the Debian build use it)
compile:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROOMD_TESTING=OFF -DROOMD_WERROR=$(WERROR) \
	  -DCMAKE_INSTALL_PREFIX=$(PREFIX) -DROOMD_SYSCONFDIR=$(SYSCONFDIR) $(CMAKE_ARGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The config is installed only when absent (an operator's edits survive a reinstall).
install: compile
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)

deb:
	dpkg-buildpackage -us -uc -b

asan: test-deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DROOMD_SANITIZE=ON -DROOMD_TESTING=ON -DROOMD_WERROR=$(WERROR) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

fuzz-build: test-deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DROOMD_FUZZ=ON -DROOMD_TESTING=OFF -DROOMD_WERROR=OFF >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $$(cd fuzz && ls fuzz_*.c | sed 's/\.c$$//')

fuzz: fuzz-build
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

run: build
	mkdir -p var
	$(BUILD)/roomd -c $(CONFIG)

check-config: build
	mkdir -p var
	$(BUILD)/roomd --check-config $(CONFIG)

test: asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  scripts/test.sh $(ASAN_BUILD)
	$(MAKE) fuzz-build
	scripts/fuzz.sh $(FUZZ_BUILD) 10

bench: build
	bench/run.sh $(BUILD)

format:
	clang-format -i $$(git ls-files 'src/*.c' 'src/*.h' 'tools/*.c' 'tests/*.c' 'tests/*.h' 'bench/*.c')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
