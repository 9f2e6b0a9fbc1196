#!/usr/bin/env bash
# The wheel on the GPU machine, offline: pip install --no-index into a fresh virtual environment
# (with the system's PyTorch visible), record a PyTorch training loop with the installed
# `vramtrace`, analyse the traces. Run from the repository root with the wheel and this
# directory's wheel_train.py in $DEV (default .dev-fleet); everything goes to $OUT/wheel.log.
set -u
DEV=${DEV:-.dev-fleet}
LOG=$OUT/wheel.log
T=/tmp/vt-traces
step() { echo; echo "\$ $*"; "$@" 2>&1; echo "[exit $?]"; }
# The Python that has PyTorch, before the virtual environment's comes first on PATH.
PY=$(command -v python3)
{
  step ldd --version
  step "$PY" -c 'import sys, torch; print(sys.executable, torch.__version__, torch.__file__)'
  step python3 --version
  step "$PY" -m venv --system-site-packages /tmp/vt-venv
  step /tmp/vt-venv/bin/pip install --no-index "$DEV"/vramtrace-*.whl
  export PATH=/tmp/vt-venv/bin:$PATH
  step which vramtrace
  step python -c 'import vramtrace; print(vramtrace.preload_path())'
  step vramtrace record -o $T/native.vramtrace -- "$PY" "$DEV"/wheel_train.py 20
  step vramtrace record --requests -o $T/requests.vramtrace -- "$PY" "$DEV"/wheel_train.py 20
  step vramtrace info $T/requests.vramtrace
  step vramtrace summary $T/native.vramtrace
  step vramtrace replay $T/requests.vramtrace --policy pytorch,pytorch-expandable,cuda-async
  step vramtrace export $T/native.vramtrace $T/requests.vramtrace --to parquet -o $T/fleet/ --policy pytorch
  step ls -la $T $T/fleet/events
} >"$LOG" 2>&1
cp $T/*.vramtrace "$OUT"/ 2>/dev/null
exit 0
