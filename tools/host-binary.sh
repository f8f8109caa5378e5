#!/usr/bin/env bash
# Builds the rigrun that `{{ rigrun }}` sends to hosts: for glibc 2.17 and newer (CentOS 7, RHEL
# 8, Ubuntu 20.04 and every later Linux), without debug sections, for one target triple.
#
#   bash tools/host-binary.sh                              for hosts of this machine's CPU
#   bash tools/host-binary.sh aarch64-unknown-linux-gnu    for Grace Hopper / Grace Blackwell hosts
#
# It links against glibc 2.17 with zig (cargo-zigbuild and ziglang, both from PyPI, installed
# once into a venv under the cache folder), adds the target's standard library with rustup when
# it is missing, and puts the binary where rigrun looks for it:
# $RIGRUN_HOST_BINARIES/<triple>/rigrun, else ~/.cache/rigrun/host-binaries/<triple>/rigrun.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
triple=${1:-$(rustc -vV | sed -n 's/^host: //p')}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rigrun
folder=${RIGRUN_HOST_BINARIES:-$cache/host-binaries}
venv=$cache/zig-venv
# Pinned: the build must not change under the user between two runs.
tools=(cargo-zigbuild==0.24.1 ziglang==0.17.1)

if ! "$venv/bin/pip" freeze 2>/dev/null | grep -qx "${tools[0]}" \
  || ! "$venv/bin/pip" freeze 2>/dev/null | grep -qx "${tools[1]}"; then
  echo "host-binary: installing ${tools[*]} into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${tools[@]}"
fi
if ! rustup target list --installed | grep -qx "$triple"; then
  echo "host-binary: adding the standard library for $triple"
  rustup target add "$triple"
fi

echo "host-binary: building rigrun for $triple, glibc 2.17 and newer"
# zig is found as `python3 -m ziglang` from the venv. A panic on a host aborts the process
# (it is said on stderr and the step fails) rather than unwinding: nothing on the host catches
# one, and the unwinding tables were 3.6 MB of the 21.8 MB this binary weighed with them.
PATH="$venv/bin:$PATH" CARGO_PROFILE_RELEASE_PANIC=abort \
  cargo zigbuild --locked --release --target "$triple.2.17"
install -D -m 755 "${CARGO_TARGET_DIR:-target}/$triple/release/rigrun" "$folder/$triple/rigrun"
echo "host-binary: $folder/$triple/rigrun ($(du -h "$folder/$triple/rigrun" | cut -f1))"
