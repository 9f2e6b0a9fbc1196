#!/usr/bin/env bash
# The recorder's cost per call on a GPU machine: a CUDA program (overhead.cu) and the fake-driver
# client of tests/ (pure hook cost, no driver work), each plain and under the recorder.
set -u
BIN=${BIN:-.dev-recorder}
R=$OUT/ov
mkdir -p "$R"
nvcc -O2 -o /tmp/overhead $BIN/workloads/programs/overhead.cu
P=$BIN/libvramtrace_preload.so
{
    echo "== overhead.cu plain"; /tmp/overhead
    echo "== overhead.cu recorded"; LD_PRELOAD=$P VRAMTRACE_OUTPUT=/tmp/ov.vramtrace /tmp/overhead
    F=$BIN/fake
    for i in 1 2 3; do
        echo "== fake plain"; LD_LIBRARY_PATH=$F $F/client gpa threads 1 1000000 | grep ns
        echo "== fake recorded"; LD_LIBRARY_PATH=$F LD_PRELOAD=$P VRAMTRACE_OUTPUT=/tmp/f.vramtrace $F/client gpa threads 1 1000000 | grep ns
        echo "== fake disabled"; LD_LIBRARY_PATH=$F LD_PRELOAD=$P VRAMTRACE_DISABLE=1 $F/client gpa threads 1 1000000 | grep ns
    done
    echo "== fake 16 threads plain"; LD_LIBRARY_PATH=$F $F/client gpa threads 16 100000 | grep ns
    echo "== fake 16 threads recorded"; LD_LIBRARY_PATH=$F LD_PRELOAD=$P VRAMTRACE_OUTPUT=/tmp/f16.vramtrace $F/client gpa threads 16 100000 | grep ns
    nproc
} >"$R/overhead.txt" 2>&1
cat "$R/overhead.txt"
