# seckill: two commands for a new reader, `make demo` and `make test`.
SHELL := /bin/bash
.PHONY: grade grade-key lab torture torture-unsafe lessons demo demo-degrade demo-failover bench lockbench chaos clock-jump cluster cluster-stop cluster-status test services stop status build

## make demo: servers up, release build, every strategy under 500 buyers, one comparison table.
demo:
	COMMAND_AS="make demo" scripts/demo.sh

## make lab: the lab, one page on loopback (http://127.0.0.1:7700/, LAB_PORT=... for another):
## pick a lock, send the crowd, pause the holder, kill an instance, cut its links or jump its
## clock with a click, and read the verdict with the checks that failed. Ctrl-C stops it and
## everything it started. No root: it starts Redis servers of its own (redis-server on the PATH).
LAB_PORT ?= 7700
lab:
	cargo build --release --workspace
	target/release/lab --port $(LAB_PORT)

## make torture: rounds of random faults over the lab's strategies, each drawn from a seed and
## judged by the history's checks, until MINUTES (10) have passed, then a table. SEED=N draws
## a run again; STRATEGIES=redis,etcd, FENCING=off and ROUNDS=N narrow it; SHRINK=1 shrinks
## every round that was not held; PUBLISH=1 writes docs/results/torture.md. A round that was
## not held where it must hold is shrunk and kept in lab/regressions/, which make chaos plays
## again. No root: it runs on the lab's own servers.
torture:
	cargo build --release --workspace
	status=0; target/release/torture --dir .run/torture || status=$$?; \
	if [[ $$status != 2 ]]; then scripts/lib/publish.sh docs/results/torture.md torture "make torture" .run/torture/table.md; fi; \
	exit $$status

## make torture-unsafe: the same generator with fencing off everywhere, so that every round
## holds a known hole (none, local, or a lock whose tokens the stock does not check): the
## checks must find it. Its table gives each fault's detection rate; PUBLISH=1 writes it to
## docs/results/torture-unsafe.md.
torture-unsafe:
	cargo build --release --workspace
	status=0; FENCING=off target/release/torture --dir .run/torture-unsafe || status=$$?; \
	if [[ $$status != 2 ]]; then scripts/lib/publish.sh docs/results/torture-unsafe.md torture-unsafe "make torture-unsafe" .run/torture-unsafe/table.md; fi; \
	exit $$status

## make lessons: every lesson's commands (scripts/lessons/) run again on the current build,
## each output rewritten where the pages show it (the lessons in both languages, the README),
## dated, with the commit. `scripts/lessons.sh 3 10` for some.
lessons:
	scripts/lessons.sh

## make grade: the break-it exercises (docs/teach/break-it.md) graded by the suite: ten rows of
## the tests run on your tree, each ok or FAILED, and which marked lines you deleted. Needs only
## the test Redis (a redis-server on the PATH; no root).
grade:
	scripts/services.sh start redis-test
	cargo build -q -p testkit --bin grade
	target/debug/grade

## make grade-key: the answer key proved: each exercise's line deleted in a copy of the tree
## (.run/grade/), in turn, and exactly the rows of the key fail; none on the untouched copy.
## With PUBLISH=1 its table goes into the answers of docs/teach/break-it.md and its twin.
grade-key:
	scripts/services.sh start redis-test
	cargo build -q -p testkit --bin grade
	mkdir -p .run/results
	set -o pipefail; target/debug/grade --prove | tee .run/results/grade-key.md
	BUILD_PROFILE=debug scripts/lib/publish.sh docs/teach/break-it.md grade-key "make grade-key" .run/results/grade-key.md
	BUILD_PROFILE=debug scripts/lib/publish.sh docs/zh-CN/teach/break-it.md grade-key "make grade-key" .run/results/grade-key.md

## make demo-degrade: the Redis -> MySQL downgrade played live: the lock Redis killed under
## 8000 buyers and started again, the verdict, and each instance's mode over time.
demo-degrade:
	scripts/demo-degrade.sh

## make demo-failover: a Sentinel failover that loses a lock: the replica misses a grant (its
## replication link cut), the master is killed, the promoted replica grants the lock again while
## the first lease runs. 3 rounds back to back, with the promotion times. Needs root (nftables).
demo-failover:
	scripts/demo-failover.sh

## make bench: every strategy measured the same way: the 500-buyer crowd 5 times, one serial
## client, 64 keep-alive connections, each against the bound of its lock's critical path;
## one table, the ordering, and .run/results/bench/report.html. `scripts/bench.sh RUN...` for fewer.
bench:
	COMMAND_AS="make bench" scripts/bench.sh

## make lockbench: each lock alone, without the sale: acquire+release pairs per second at
## 1, 16 and 64 contenders, on one key and on a key each; then the recipes people use on the
## same servers (Curator, etcd's concurrency.Mutex, redis-py, python-redis-lock, pottery's
## Redlock; each installed on first use, loadtest/peers/) and ours against each;
## JSON in .run/results/lockbench.json; with PUBLISH=1 the tables also go into docs/results/lockbench.md.
lockbench: services
	cargo build --release -p loadtest --bin lockbench
	set -o pipefail; target/release/lockbench --json .run/results/lockbench.json | tee .run/results/lockbench.md
	scripts/lib/publish.sh docs/results/lockbench.md lockbench "make lockbench" .run/results/lockbench.md

## make chaos: holders paused and killed, leaders and quorums lost, Redlock masters and
## the stock Redis and MariaDB killed, one instance cut off from its lock (partitioned,
## delayed, reset) by a nemesis, the lock Redis failed over by Sentinel after its replica
## missed a grant, the stock's Redis after its replica missed sales (each with and without
## WAIT), and the clock rows of make clock-jump, under
## load; 3 runs of each, one table.
## `scripts/chaos.sh RUNS STRATEGY...` or CHAOS_FAULTS="..." for fewer.
chaos:
	COMMAND_AS="make chaos" scripts/chaos.sh

## make clock-jump: wall clocks that jump, under load: a Redlock master's and the redis lock's
## Redis past the TTL (two holders; the fence refuses the late write), the instances' by an hour.
clock-jump:
	COMMAND_AS="make clock-jump" scripts/clock-jump.sh

## make cluster: the chaos suite's servers (3 etcd, 3 ZooKeeper, 5 Redlock masters, AOF Redis,
## a lock Redis, a second one with a replica and 3 Sentinels that fail it over, MariaDB) on
## their own ports, data in .run/cluster/; cluster-stop stops only those.
cluster:
	scripts/cluster.sh start

cluster-stop:
	scripts/cluster.sh stop

cluster-status:
	scripts/cluster.sh status

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
