#!/usr/bin/env bash
# The course's outputs, made again. Each lesson's commands are a script of their own in
# scripts/lessons/ (NN-what.sh, written as a reader would type them: from the repository
# root, with target/release first on the PATH). This runs them on the current build and
# writes each script and what it printed into every page that shows it (the English
# lesson, the Chinese one, the README), between the two markers
#   <!-- output NN-what: begin ... -->
#   <!-- output NN-what: end -->
# with the date, the commit, the machine and how long it took. Prose outside the markers
# stays as it is, so a page never quotes an output by hand.
#
#   scripts/lessons.sh          every lesson (make lessons)
#   scripts/lessons.sh 3 10     lessons 3 and 10
#
# Run for every lesson, it also writes how long each script took into the course's index
# (docs/lessons/README.md, and the Chinese one), as the block `latest lessons`.
#
# A script's `# Needs:` line says what it needs. When every script run needs only
# `redis`, this starts that one Redis (`scripts/services.sh start redis`: no root when
# `redis-server` is on the PATH); otherwise all the servers of `make services`. The
# scripts of the cluster lessons start their own. A lesson that needs root is refused,
# by name, when not run as root. A script that fails (exit
# code not 0, or a line `... exited with code N` with N above 1) leaves its block as it
# was, and this exits 1 after the others have run.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit
source "$ROOT/scripts/lib/publish.sh" # replace_block, this_build

say() { printf '[lessons] %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }

# How long one script may run: the slowest, the bench lesson, takes about 4 minutes.
SCRIPT_TIMEOUT=${LESSONS_SCRIPT_TIMEOUT:-1200}

scripts_of() {
  local lesson
  if (($# == 0)); then
    ls scripts/lessons/[0-9][0-9]-*.sh
    return
  fi
  for lesson in "$@"; do
    [[ $lesson =~ ^[0-9]+$ ]] || die "\`$lesson\` is not a lesson number; try \`scripts/lessons.sh 1 3\`"
    local found
    found=$(ls scripts/lessons/"$(printf '%02d' "$((10#$lesson))")"-*.sh 2>/dev/null) ||
      die "lesson $lesson has no script in scripts/lessons/ (the lessons with one: $(basename -a scripts/lessons/*.sh | cut -c1-2 | sort -u | tr '\n' ' '))"
    echo "$found"
  done
}

# pages_showing NAME: every page with NAME's begin marker.
pages_showing() {
  grep -rlF --include='*.md' "<!-- output $1: begin" README.md docs
}

# block_of SCRIPT OUTPUT DATED PAGE: the block PAGE shows, the script and what it printed.
# A lesson shows all of it. The READMEs, landing pages, show the load test's report alone
# (from its `== seckill load test` line to `loadtest exited with code`); the lesson that
# the script belongs to shows the servers' logs around it.
block_of() {
  local script=$1 output=$2 dated=$3 page=$4 name
  name=$(basename "$script" .sh)
  echo "<!-- output $name: begin (\`scripts/lessons.sh $((10#${name%%-*}))\` rewrites this block; edit outside it) -->"
  echo
  echo '```sh'
  tail -n +2 "$script" # all but the #! line
  echo '```'
  echo
  if [[ $page == README.md || $page == docs/zh-CN/README.md ]]; then
    echo "$dated; the load test's report (its lesson shows the servers' logs too):"
    echo
    echo '```'
    sed -n '/^== seckill load test/,/exited with code/p' "$output"
  else
    echo "$dated:"
    echo
    echo '```'
    cat "$output"
  fi
  echo '```'
  echo
  echo "<!-- output $name: end -->"
}

mapfile -t SCRIPTS < <(scripts_of "$@") || exit 1
((${#SCRIPTS[@]} > 0)) || die "no lesson script to run"
for script in "${SCRIPTS[@]}"; do
  name=$(basename "$script" .sh)
  [[ -n $(pages_showing "$name") ]] || die "no page shows $script: put its markers (<!-- output $name: begin -->) in its lesson"
  if grep -q '^# Needs: root' "$script" && [[ $(id -u) -ne 0 ]]; then
    die "$script needs root (see its \`# Needs:\` line); run \`sudo scripts/lessons.sh ...\` or leave that lesson out"
  fi
done

if grep -L '^# Needs: redis$' "${SCRIPTS[@]}" | grep -q .; then
  scripts/services.sh start >/dev/null || die "the servers of make services did not start; run \`make services\` to see why"
else
  scripts/services.sh start redis >/dev/null ||
    die "the Redis of the lessons did not start; run \`scripts/services.sh start redis\` to see why"
fi
say "building in release mode"
cargo build --release --workspace -q || die "the release build failed"
export PATH="$ROOT/target/release:$PATH"
mkdir -p .run/lessons

failed=()
timings=$(mktemp)
printf '| script | needs | seconds |\n| --- | --- | ---: |\n' >"$timings"
started_all=$SECONDS
for script in "${SCRIPTS[@]}"; do
  name=$(basename "$script" .sh)
  output=.run/lessons/$name.out
  say "$script"
  started=$SECONDS
  # A session of its own, so that whatever the script leaves running is stopped with it.
  setsid timeout "$SCRIPT_TIMEOUT" bash "$script" >"$output" 2>&1 </dev/null &
  pid=$!
  wait "$pid"
  status=$?
  kill -- -"$pid" 2>/dev/null
  took=$((SECONDS - started))
  sed -i 's/\x1b\[[0-9;]*m//g; s/\r$//' "$output" # no colour codes, no carriage returns
  if ((status != 0)) || grep -Eq 'exited with code ([2-9]|[1-9][0-9]+)$' "$output"; then
    say "$script failed (exit code $status); its blocks are left as they were. Its output: $output"
    tail -n 20 "$output" | sed 's/^/    /' >&2
    failed+=("$script")
    continue
  fi
  dated="Output on $(date -u '+%Y-%m-%d %H:%M UTC'), $(this_build), in $took s"
  for page in $(pages_showing "$name"); do
    block=$(mktemp)
    block_of "$script" "$output" "$dated" "$page" >"$block"
    replace_block "$page" "<!-- output $name: begin" "<!-- output $name: end -->" "$block" || failed+=("$script")
    rm -f "$block"
  done
  say "$script: $took s, in $(pages_showing "$name" | tr '\n' ' ')"
  # shellcheck disable=SC2016 # the backticks are Markdown's, printed as they are
  printf '| `%s` | %s | %s |\n' "$script" "$(sed -n 's/^# Needs: //p' "$script")" "$took" >>"$timings"
done

total=$((SECONDS - started_all))
say "${#SCRIPTS[@]} scripts in $total s"
if ((${#failed[@]} > 0)); then
  die "failed: ${failed[*]}"
fi
if (($# == 0)); then
  printf '| all %s, one after another | | %s |\n' "${#SCRIPTS[@]}" "$total" >>"$timings"
  PUBLISH=1 publish_results "$ROOT/docs/lessons/README.md" lessons "make lessons" "$timings"
  PUBLISH=1 publish_results "$ROOT/docs/zh-CN/lessons/README.md" lessons "make lessons" "$timings"
fi
rm -f "$timings"
