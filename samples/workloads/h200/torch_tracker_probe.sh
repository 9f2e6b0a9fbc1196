#!/usr/bin/env bash
# Proves the PyTorch trace-tracker route on a GPU (docs/torch-tracker.md). About two minutes:
#   1. compiles torch_tracker_layout.cpp against the installed wheel's headers and prints the
#      vtable slots, TraceEntry layout, Action values and std::function size (layout.json);
#   2. builds two trackers: torch_tracker_raw.c (the recorder's way: no headers, layout given at
#      run time) and torch_tracker_cxx.cpp (PyTorch's own C++ API);
#   3. runs torch_tracker_probe.py under the native and expandable allocators, a CUDA-graph
#      capture and torch.compile(mode="reduce-overhead"), comparing both trackers' counts with
#      torch.cuda.memory_stats().
#
#   W=samples/workloads OUT=/tmp/probe samples/workloads/h200/torch_tracker_probe.sh
set -u
W=${W:-samples/workloads}
OUT=${OUT:-/tmp/torch-tracker-probe}
R=$OUT/probe
mkdir -p "$R"
export PYTHONUNBUFFERED=1
TD=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_INC=$(dirname "$(dirname "$NVCC")")/include
ABI=$(python3 -c 'import torch;print(int(torch.compiled_with_cxx11_abi()))')
INC="-I$TD/include -I$TD/include/torch/csrc/api/include -I$CUDA_INC -I/usr/local/cuda/include"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    g++ --version | head -1
    echo "torch dir $TD; cuda include $CUDA_INC; cxx11 abi $ABI"
    ls "$TD/lib" | head -50
    nm -D --defined-only "$TD/lib/libc10_cuda.so" | grep -c ' [TWBDV] '
    nm -D --defined-only "$TD/lib/libc10_cuda.so" | grep -i 'allocator' | head -20
    cat "$TD/version.py"
} >"$R/machine.txt" 2>&1
g++ -std=c++17 -O1 -Wno-invalid-offsetof -D_GLIBCXX_USE_CXX11_ABI=$ABI $INC \
    -o /tmp/tracker_layout "$W/probes/torch_tracker_layout.cpp" 2>"$R/layout.err"
/tmp/tracker_layout >"$R/layout.json" 2>>"$R/layout.err"
gcc -O2 -shared -fPIC -o /tmp/tracker_raw.so "$W/probes/torch_tracker_raw.c" -ldl 2>"$R/raw.err"
g++ -std=c++17 -O2 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=$ABI $INC \
    -o /tmp/tracker_cxx.so "$W/probes/torch_tracker_cxx.cpp" -L"$TD/lib" -lc10_cuda -lc10 \
    -Wl,-rpath,"$TD/lib" 2>"$R/cxx.err"
export RAW_SO=/tmp/tracker_raw.so CXX_SO=/tmp/tracker_cxx.so
for mode in native expandable graph compile; do
    conf=
    [ $mode = expandable ] && conf=expandable_segments:True
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 150 python3 "$W/probes/torch_tracker_probe.py" $mode \
        "$R/layout.json" "$R/$mode.json" >"$R/$mode.out" 2>"$R/$mode.err"
    echo "$mode rc=$?" >>"$R/rc.txt"
done
tar czf "$OUT/probe.tar.gz" -C "$OUT" probe
cat "$R/layout.json" "$R/rc.txt"
for mode in native expandable graph compile; do tail -c 3000 "$R/$mode.err"; done
