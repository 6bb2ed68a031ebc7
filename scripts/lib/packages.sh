# shellcheck shell=bash
# install_packages PACKAGE...: installs the Debian packages of the list that are missing,
# with apt-get, once. Shared by services.sh (the servers) and the lock peers of
# `make lockbench` (loadtest/peers/*/run: Java's Curator, Go's etcd client).
#
# Package scripts must not start system-wide copies of servers (we run our own), so a
# policy file forbids it for the length of the install; it is removed again however apt
# ends (the trap), and someone else's policy file is left as it is.
# The caller sets LOGS (apt's output goes to $LOGS/apt.log) and defines say and die.

install_packages() {
  local missing=() package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) -ne 0 ]]; then
    die "missing packages: ${missing[*]}. Install them with: sudo apt-get install -y ${missing[*]}"
  fi
  say "installing ${missing[*]} (apt-get; this takes a minute once)"
  local policy=/usr/sbin/policy-rc.d ours=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && ours=1
    # shellcheck disable=SC2064 # the path is fixed now, on purpose
    trap "rm -f '$policy'" EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >>"$LOGS/apt.log" 2>&1 || die "apt-get update failed; see $LOGS/apt.log"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$LOGS/apt.log" 2>&1 ||
    die "apt-get install ${missing[*]} failed; see $LOGS/apt.log"
  if ((ours)); then rm -f "$policy"; trap - EXIT; fi
  return 0
}
