#!/usr/bin/env bash
# Builds the wheel: dist/vramtrace-VERSION-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#
#   pip install maturin ziglang cargo-zigbuild
#   packaging/build-wheel.sh                  # optimized build, profile `dist` (README.md, "Install")
#   PROFILE=dev OUT=DIR packaging/build-wheel.sh   # unoptimized, as the CI test builds it
#
# Both files link against glibc 2.17's symbol versions through zig, so the wheel installs on any
# manylinux2014 system (CentOS 7 and later): the recorder first (cargo-zigbuild), copied into the
# Python package, then the command (maturin, which packs both).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-dist}
out=${OUT:-dist}
target=x86_64-unknown-linux-gnu
case "$profile" in
  dev) dir=debug ;;
  *) dir=$profile ;;
esac
cargo zigbuild --quiet --profile "$profile" -p vramtrace-recorder --target "$target.2.17"
cp "target/$target/$dir/libvramtrace_preload.so" python/vramtrace/
maturin build --quiet --profile "$profile" --zig --target "$target" --out "$out"
