# shellcheck shell=bash
# The strategies, as each one's own file describes it. The scripts ask the binary
# (`seckill strategies --json`) instead of typing a list, so a new strategy reaches the
# demo, the bench and the chaos suite by its one line in src/strategy.rs.
#
# The caller sets ROOT and defines die. SECKILL_BIN, when set, is the binary to ask (the
# tests give theirs); otherwise the release build, brought up to date first: a binary left
# from older sources would list strategies the sources no longer have, or miss new ones.

STRATEGIES_JSON=

# load_strategies: asks the binary once, for every later question.
load_strategies() {
  local bin=${SECKILL_BIN:-$ROOT/target/release/seckill}
  if [[ -z ${SECKILL_BIN:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet --bin seckill) || die "could not build $bin to ask it for the strategies"
  fi
  STRATEGIES_JSON=$("$bin" strategies --json) ||
    die "\`$bin strategies --json\` failed; rebuild it (\`cargo build --release\`)"
}

# strategies FILTER: the names, in --lock's order, of the strategies that FILTER (a jq
# condition over one strategy's fields: name, backend, lock_flag, tokens, oversells)
# keeps; `true` keeps them all.
strategies() {
  [[ -n $STRATEGIES_JSON ]] || die "load_strategies first"
  jq -r ".[] | select($1) | .name" <<<"$STRATEGIES_JSON"
}

# strategy_field STRATEGY FIELD: one field of one strategy (`null` if it has none).
strategy_field() {
  [[ -n $STRATEGIES_JSON ]] || die "load_strategies first"
  jq -r --arg name "$1" ".[] | select(.name == \$name) | .$2" <<<"$STRATEGIES_JSON"
}

# with_variants VARIANT...: every strategy, each followed by the VARIANTs of it (a VARIANT
# is a run such as `mysql+no-semaphore`), then the VARIANTs of no strategy (`python-peer`),
# one a line.
with_variants() {
  local strategy variant placed=" "
  for strategy in $(strategies true); do
    echo "$strategy"
    for variant in "$@"; do
      if [[ ${variant%%+*} == "$strategy" ]]; then echo "$variant"; placed+="$variant "; fi
    done
  done
  for variant in "$@"; do
    [[ $placed == *" $variant "* ]] || echo "$variant"
  done
}
