# shellcheck shell=bash
# publish_safety_matrix: writes the safety matrix of docs/results/chaos.md (`loadtest
# safety-matrix`) into the teacher's pages, English and Chinese, between their markers.
# `make chaos` calls it once it published its table; run alone, from the repository
# root after a release build, it makes the pages again from the table already there.
# shellcheck disable=SC2094 # the block goes to a file of its own, never to the table it reads
publish_safety_matrix() {
  local begin="<!-- safety matrix: begin" end="<!-- safety matrix: end -->" block page
  block=$(mktemp)
  {
    echo "$begin (\`make chaos\` rewrites this block from docs/results/chaos.md; edit outside it) -->"
    echo
    target/release/loadtest safety-matrix docs/results/chaos.md || { rm -f "$block"; return 1; }
    echo
    echo "$end"
  } >"$block"
  for page in docs/teach/safety-matrix.md docs/zh-CN/teach/safety-matrix.md; do
    replace_block "$page" "$begin" "$end" "$block" || { rm -f "$block"; return 1; }
  done
  rm -f "$block"
}
