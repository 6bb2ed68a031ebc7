# seckill: two commands for a new reader, `make demo` and `make test`.
SHELL := /bin/bash
.PHONY: demo demo-degrade chaos test services stop status build

## make demo: servers up, release build, every strategy under 500 buyers, one comparison table.
demo:
	scripts/demo.sh

## make demo-degrade: the Redis -> MySQL downgrade played live: the lock Redis killed under
## 3000 buyers and started again, the verdict, and each instance's mode over time.
demo-degrade:
	scripts/demo-degrade.sh

## make chaos: a lock holder paused past its lease (SIGSTOP, fencing on and off) or killed,
## 3 runs per strategy, one table. `scripts/chaos.sh RUNS STRATEGY...` for fewer.
chaos:
	scripts/chaos.sh

## make test: servers up, then the whole test suite against them.
## The last line adds up every test binary's result.
test: services
	set -o pipefail; status=0; \
	cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee .run/test.log || status=$$?; \
	awk '/^test result:/ { passed += $$4; failed += $$6 } END { printf "total: %d passed, %d failed\n", passed, failed }' .run/test.log; \
	exit $$status

## make services / make stop / make status: the backing servers alone (data and logs in .run/).
services:
	scripts/services.sh start

stop:
	scripts/services.sh stop

status:
	scripts/services.sh status

build:
	cargo build --release --workspace
