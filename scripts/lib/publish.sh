#!/usr/bin/env bash
# Publishing a run into docs/results/. With PUBLISH=1, a script that made a table writes it
# into the page that shows it, between that page's two markers, with the date, the command
# and the machine. Everything outside the markers (the notes on earlier, dated runs) stays
# as it is, so a new run never means hand-editing a page.
#
#   PUBLISH=1 scripts/lib/publish.sh PAGE NAME COMMAND TABLE    (or source it: publish_results)
#
# The markers, each on a line of its own:
#   <!-- latest NAME: begin ... -->
#   <!-- latest NAME: end -->
# Without PUBLISH=1 this does nothing, so the scripts call it unconditionally.

publish_results() {
  [[ ${PUBLISH:-0} == 1 ]] || return 0
  local page=$1 name=$2 command=$3 table=$4
  local begin="<!-- latest $name: begin" end="<!-- latest $name: end -->"
  if [[ ! -f $page ]]; then
    echo "publish: there is no $page (run from the repository root)" >&2
    return 1
  fi
  if [[ ! -s $table ]]; then
    echo "publish: $table is empty: this run made no table, so $page is left as it was" >&2
    return 1
  fi
  local block
  block=$(mktemp)
  {
    echo "$begin (\`PUBLISH=1 $command\` rewrites this block; edit outside it) -->"
    echo
    echo "Latest run: \`$command\`, $(date -u '+%Y-%m-%d %H:%M UTC'), $(this_build)."
    echo
    cat "$table"
    echo
    echo "$end"
  } >"$block"
  replace_block "$page" "$begin" "$end" "$block" && echo "publish: the latest $name is now in $page"
  local status=$?
  rm -f "$block"
  return $status
}

# this_build: the commit and the machine a run was made on, for the line that dates it:
# `commit 1a2b3c4, 2 cores (AMD EPYC 7B13), release build` (BUILD_PROFILE=debug for a
# run of the tests' build). A commit with changes not yet
# committed says so (`1a2b3c4 + changes`): that run is not reproducible from the commit.
this_build() {
  local commit cpu
  if commit=$(git rev-parse --short HEAD 2>/dev/null); then
    git diff --quiet HEAD -- src loadtest scripts lab testkit || commit+=" + changes"
  else
    commit="unknown"
  fi
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
  echo "commit $commit, $(nproc) cores ($cpu), ${BUILD_PROFILE:-release} build"
}

# replace_block PAGE BEGIN END BLOCK: writes the file BLOCK into PAGE in place of the lines
# from the one starting with BEGIN to the line END, both included. Refuses, changing
# nothing, unless PAGE has exactly one of each.
replace_block() {
  local page=$1 begin=$2 end=$3 block=$4 begins ends
  if [[ ! -s $block ]]; then
    echo "publish: the block for $page is empty or gone; $page is left as it was" >&2
    return 1
  fi
  begins=$(awk -v b="$begin" 'index($0, b) == 1' "$page" | wc -l)
  ends=$(grep -cxF -- "$end" "$page")
  if ((begins != 1 || ends != 1)); then
    echo "publish: $page needs one line starting '$begin' and one line '$end'" \
      "around the block to replace (it has $begins and $ends); $page is left as it was" >&2
    return 1
  fi
  awk -v begin="$begin" -v end="$end" -v block="$block" '
    index($0, begin) == 1 { while ((getline line < block) > 0) print line; skipping = 1; next }
    skipping && $0 == end { skipping = 0; next }
    !skipping { print }' "$page" >"$page.publishing" && mv "$page.publishing" "$page"
}

# command_line VARIABLE... -- WORDS...: the command as a reader would type it again, with
# those of the VARIABLEs that are set in front: `BENCH_RUNS=1 scripts/bench.sh redis`.
# A Makefile target that runs the script says what the reader typed in COMMAND_AS
# (`make bench`), which then stands for WORDS.
command_line() {
  local words=()
  while (($# > 0)) && [[ $1 != -- ]]; do
    [[ -n ${!1:-} ]] && words+=("$1=$(printf '%q' "${!1}")")
    shift
  done
  shift
  if [[ -n ${COMMAND_AS:-} ]]; then words+=("$COMMAND_AS"); else words+=("$@"); fi
  echo "${words[*]}"
}

# Run as a command (the Makefile's lockbench does), not sourced.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  (($# == 4)) || { echo "usage: PUBLISH=1 $0 PAGE NAME COMMAND TABLE" >&2; exit 2; }
  publish_results "$@"
fi
