# seckill: two commands for a new reader, `make demo` and `make test`.
.PHONY: demo test services stop status build

## make demo: servers up, release build, every strategy under 500 buyers, one comparison table.
demo:
	scripts/demo.sh

## make test: servers up, then the whole test suite against them.
test: services
	cargo test --workspace

## make services / make stop / make status: the backing servers alone (data and logs in .run/).
services:
	scripts/services.sh start

stop:
	scripts/services.sh stop

status:
	scripts/services.sh status

build:
	cargo build --release --workspace
