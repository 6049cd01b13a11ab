#!/usr/bin/env bash
# install-deps.sh: install from Debian's packages whatever fairq needs to build, test and run.
# Idempotent: it asks apt only for the packages that are missing.
set -euo pipefail

pkgs=(build-essential cmake pkg-config
      libcmocka-dev libnats-dev nats-server libcjson-dev libcyaml-dev libyaml-dev
      libmicrohttpd-dev python3 python3-yaml python3-prometheus-client
      gnuplot-nox prometheus openssl
      libssl-dev            # libcrypto: a credentials file's seed checked (lib/creds.c)
      python3-cryptography  # tests: nkeys, JWTs and credentials files (tests/support/nkey.py)
      clang libclang-rt-14-dev)   # make fuzz: clang only recommends its runtimes

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
