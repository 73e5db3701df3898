# SPDX-License-Identifier: GPL-2.0
# rxe_rs: build the module (against our cached test kernel, or any CONFIG_RUST tree via KDIR=),
# the provider, and run the VM tests.
#
#   make                 module (+ provider) against the cached test kernel (built on first use)
#   make KDIR=/lib/modules/$(uname -r)/build   module against another CONFIG_RUST kernel
#   make kdir            print the test kernel's path
#   make provider        the libibverbs provider (librxe_rs-rdmav34.so)
#   make test-tools      programs the VM tests run in the guest (the hostile peer, test modules)
#   make install         install module and provider on this machine
#   make deb             Debian packages in target/deb/: rxe-rs-dkms and librxe-rs (the provider)
#   make dkms            this tree into DKMS, built and installed for the running kernel
#                        (KERNELVER=... for another); make dkms-remove takes it out
#   make run             the demo: two VMs, rxers0 on each, ibv_devinfo, ibv_rc_pingpong, ib_write_bw
#   make clippy          the module through clippy (the kernel's CLIPPY=1, with rustc-web's clippy)
#   make lint            rustfmt + clippy (module and host crates), warnings are errors
#   make check           all tests: lints, host unit tests, VM selftests (the README's command)
#   make check-quick     the inner loop: lints, host unit tests, one guest with the core scripts
#   make soak            the hostile campaign for 30 min (SOAK_MINUTES): hostile peer, lossy link
#                        (all its pairings);
#                        its first round also runs the whole interop matrix, NVMe-oF in every
#                        pairing, and pyverbs on rdma_rxe
#   make bench           rxe_rs vs rdma_rxe vs TCP on two VMs (bench kernel): table, CSV, PNG

SHELL := /bin/bash
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
RXE_RS_CACHE := $(shell bash -c "source $(ROOT)/scripts/lib/env.sh && echo \$$RXE_RS_CACHE")
BINDGEN ?= $(shell bash -c "source $(ROOT)/scripts/lib/env.sh && echo \$$BINDGEN")
# rustup's rustc comes first on PATH and cannot build against the Debian-configured kernel.
KMAKE_TOOLS := LLVM=-19 RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc BINDGEN=$(BINDGEN)

KFLAVOR ?= debug
KDIR ?= $(shell $(ROOT)/scripts/kernel.sh path $(KFLAVOR))
# The cached test kernel is built on demand; a KDIR given by the user must already be built.
KDIR_DEP := $(if $(filter $(RXE_RS_CACHE)/%,$(KDIR)),$(KDIR)/.rxe_rs-built)
KMAKE = $(MAKE) -C $(KDIR) M=$(ROOT) $(KMAKE_TOOLS)

.PHONY: all module provider test-tools kdir kernel clean install deb dkms dkms-remove setup run check test unit-test selftest bench clippy lint soak check-quick

all: module provider

$(RXE_RS_CACHE)/kernel/%/.rxe_rs-built:
	$(ROOT)/scripts/kernel.sh build $(KFLAVOR) >/dev/null

kernel: $(KDIR_DEP)

kdir:
	@echo $(KDIR)

# Kbuild records command lines relative to the kernel tree, so objects (and our generated
# bindings) built against another tree look up to date: switching trees (make bench builds
# against the bench kernel) starts from clean, for the module and for clippy.
define same_kdir
	@if [[ -e $(ROOT)/rxe_rs.ko.kdir && "$$(cat $(ROOT)/rxe_rs.ko.kdir)" != "$(KDIR)" ]]; then \
		echo "$@: built for $$(cat $(ROOT)/rxe_rs.ko.kdir) before: cleaning"; $(KMAKE) clean >/dev/null; fi
	@echo $(KDIR) >$(ROOT)/rxe_rs.ko.kdir
endef

module: $(KDIR_DEP)
	$(same_kdir)
	$(KMAKE) modules

provider:
	cargo build --release --locked -p rxe_rs_provider

# The hostile peer's generator, and the kernel modules that play a kernel ULP in the guest.
TEST_KMODS := $(ROOT)/selftests/kmod
test-tools: $(KDIR_DEP)
	cargo build --release --locked -p rxe_rs_hostile_peer
	@if [[ -e $(TEST_KMODS)/.kdir && "$$(cat $(TEST_KMODS)/.kdir)" != "$(KDIR)" ]]; then \
		$(MAKE) -C $(KDIR) M=$(TEST_KMODS) $(KMAKE_TOOLS) clean >/dev/null; fi
	@echo $(KDIR) >$(TEST_KMODS)/.kdir
	$(MAKE) -C $(KDIR) M=$(TEST_KMODS) $(KMAKE_TOOLS) modules

# The lints the kernel sets for Rust, and our own #![deny(...)] (arithmetic on ring and wire
# values). The clippy-driver must match the kernel's rustc: rustc-web's, not rustup's.
lint: $(KDIR_DEP)
	$(ROOT)/scripts/lint.sh

clippy: $(KDIR_DEP)
	$(same_kdir)
	$(KMAKE) CLIPPY=1 CLIPPY_DRIVER=/usr/bin/clippy-driver modules

clean:
	-$(KMAKE) clean
	-$(MAKE) -C $(KDIR) M=$(TEST_KMODS) $(KMAKE_TOOLS) clean
	cargo clean

install: module provider
	$(KMAKE) modules_install
	depmod -a $(shell $(MAKE) -s -C $(KDIR) kernelrelease)
	$(ROOT)/scripts/install-provider.sh

deb:
	$(ROOT)/scripts/package.sh deb

dkms:
	$(ROOT)/scripts/package.sh dkms $(KERNELVER)

dkms-remove:
	$(ROOT)/scripts/package.sh dkms-remove

setup:
	$(ROOT)/scripts/setup.sh

run:
	$(ROOT)/scripts/run.sh

check test:
	$(ROOT)/scripts/check.sh

check-quick:
	$(ROOT)/scripts/check.sh --quick

bench:
	$(ROOT)/scripts/bench.sh

soak:
	$(ROOT)/scripts/soak.sh

unit-test:
	cargo test --locked --workspace

selftest:
	$(ROOT)/selftests/run.sh
