#!/usr/bin/env bash
# Runs at the memory limit on a GPU (docs/validation.md, "Under pressure"), in three phases, each
# packed when it ends so that a run stopped at its time limit returns what it finished:
#   0. the vtable slots of emptyCache / getMemoryFraction / setMemoryFraction, printed by
#      torch_tracker_layout.cpp compiled against the wheel's headers ($OUT/layout.json); the
#      recording phases run only if they are the slots the recorder patches (7, 17, 18);
#   1. pressure_workloads.py grow (a cap of 4 GiB, a growing batch until OutOfMemoryError),
#      empty_cache (no cap) and capped (a cap at 0.75 of its own uncapped peak), natively and
#      with expandable segments, recorded with Python stacks, each beside its memory_stats()
#      ($OUT/pressure.tar.gz; `replay`, `summary`, `tune` and `fit` read them off the device);
#   2. the fit validation: six small workloads, natively and with expandable segments, each
#      recorded without stacks, `fit` for its own setting, then run unrecorded under a cap of
#      K x fit's smallest pool for K in FIT_FACTORS; rc 0 completed, 3 ran out of memory
#      ($OUT/fit.tar.gz, $OUT/fit.txt);
#   3. tune's pick for a capped run, run for real under the same cap: PICK_CONF (the
#      PYTORCH_CUDA_ALLOC_CONF `tune` printed for the phase-1 capped-native trace) under
#      PICK_CAP bytes, twice ($OUT/pick.txt).
#
#   BIN=DIR OUT=DIR [PHASES="record fit pick"] [PICK_CONF=... PICK_CAP=...] \
#       samples/workloads/h200/pressure_h200.sh
#
# DIR holds vramtrace and libvramtrace_preload.so (cargo build --release -p vramtrace
# -p vramtrace-recorder) and workloads/ (a copy of samples/workloads).
set -u
BIN=${BIN:-.dev-pressure}
OUT=${OUT:-/tmp/pressure-out}
FIT_FACTORS=${FIT_FACTORS:-"0.98 1.00 1.01 1.02 1.04"}
PHASES=${PHASES:-"record fit"}
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
R=/tmp/pr
W=$BIN/workloads
mkdir -p "$R/traces" "$R/fit" "$OUT"
export PYTHONUNBUFFERED=1
VT="$BIN/vramtrace record --preload $BIN/libvramtrace_preload.so"
PY="python3 $W/programs/pressure_workloads.py"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "total", torch.cuda.get_device_properties(0).total_memory)'
    date -u
} >"$R/machine.txt" 2>&1

# Phase 0: the slots.
TD=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ABI=$(python3 -c 'import torch;print(int(torch.compiled_with_cxx11_abi()))')
INC="-I$TD/include -I$TD/include/torch/csrc/api/include -I$(dirname "$(dirname "$NVCC")")/include -I/usr/local/cuda/include"
g++ -std=c++17 -O1 -Wno-invalid-offsetof -D_GLIBCXX_USE_CXX11_ABI=$ABI $INC \
    -o /tmp/tracker_layout "$W/probes/torch_tracker_layout.cpp" 2>"$R/layout.err"
/tmp/tracker_layout >"$R/layout.json" 2>>"$R/layout.err"
cp "$R/layout.json" "$OUT/"
slots=$(python3 -c "import json;d=json.load(open('$R/layout.json'));print(d['slot_emptyCache'],d['slot_getMemoryFraction'],d['slot_setMemoryFraction'])" 2>>"$R/layout.err")
echo "slots: $slots" | tee -a "$R/machine.txt"
if [ "$slots" != "7 17 18" ]; then
    tar czf "$OUT/pressure.tar.gz" -C /tmp pr
    echo "the wheel's slots are not 7 17 18: nothing recorded"
    exit 1
fi

# Phase 1: capped, OOMing and empty_cache runs.
if has record; then
rec() { # NAME CONF CAP WORKLOAD STACKS
    PYTORCH_CUDA_ALLOC_CONF=$2 PRESSURE_CAP_BYTES=$3 timeout 200 $VT --stacks "$5" \
        -o "$R/traces/$1.vramtrace" -- $PY "$4" "$R/$1.json" >>"$R/$1.log" 2>&1
    echo "$1 rc=$?" >>"$R/rc.txt"
}
G4=$((4 << 30))
rec grow-native "" $G4 grow python &
rec grow-expandable expandable_segments:True $G4 grow python &
rec empty-native "" "" empty_cache python &
rec empty-expandable expandable_segments:True "" empty_cache python &
rec capped-free-native "" "" capped none &
rec capped-free-expandable expandable_segments:True "" capped none &
wait
peak() { python3 -c "import json;print(int(0.75*json.load(open('$R/$1.json'))['max_memory_reserved']))"; }
rec capped-native "" "$(peak capped-free-native)" capped python &
rec capped-expandable expandable_segments:True "$(peak capped-free-expandable)" capped python &
wait
date -u >>"$R/rc.txt"
# The traces are analysed off the device (`replay`, `summary`, `tune`, `fit`).
tar czf "$OUT/pressure.tar.gz" -C /tmp $(cd /tmp && ls pr/*.json pr/*.txt pr/*.log) \
    $(cd /tmp && ls pr/traces/*.vramtrace)
cat "$R/rc.txt"
fi

# Phase 2: fit against real capped runs.
fitcase() { # WORKLOAD SETTING
    local n=$1-$2 conf="" pol=pytorch
    if [ "$2" = expandable ]; then conf=expandable_segments:True; pol=pytorch-expandable; fi
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout 120 $VT --stacks none -o "$R/fit/$n.vramtrace" -- \
        $PY "$1" "$R/fit/$n.free.json" >>"$R/fit/$n.log" 2>&1
    $BIN/vramtrace fit "$R/fit/$n.vramtrace" --policy $pol --json >"$R/fit/$n.fit.json" 2>>"$R/fit/$n.log"
    local f
    f=$(python3 -c "import json;print(json.load(open('$R/fit/$n.fit.json'))['policies'][0]['min_capacity_bytes'])")
    for k in $FIT_FACTORS; do
        local c
        c=$(python3 -c "print(int($k*$f))")
        PYTORCH_CUDA_ALLOC_CONF=$conf PRESSURE_CAP_BYTES=$c timeout 120 $PY "$1" "$R/fit/$n.$k.json" \
            >>"$R/fit/$n.log" 2>&1
        echo "$n fit=$f k=$k cap=$c rc=$?" >>"$R/fit/$n.txt"
    done
}
if has fit; then
for w in mlp varlen conv gpt lstm attn; do
    fitcase $w native &
    fitcase $w expandable &
done
wait
cat "$R"/fit/*.txt >"$OUT/fit.txt"
date -u >>"$OUT/fit.txt"
tar czf "$OUT/fit.tar.gz" -C /tmp $(cd /tmp && ls pr/fit/*.json pr/fit/*.txt pr/fit/*.log \
    pr/fit/*.vramtrace)
cat "$OUT/fit.txt"
fi

# Phase 3: tune's pick under the recorded cap.
if has pick; then
for i in 1 2; do
    PYTORCH_CUDA_ALLOC_CONF=$PICK_CONF PRESSURE_CAP_BYTES=$PICK_CAP timeout 200 $PY capped \
        "$R/pick-$i.json" >>"$R/pick.log" 2>&1
    echo "pick-$i rc=$? $(python3 -c "import json;d=json.load(open('$R/pick-$i.json'));s=d['memory_stats'];print('reserved_peak',s['reserved_bytes.all.peak'],'retries',s['num_alloc_retries'],'ooms',s['num_ooms'],'conf',d['conf'],'cap',d['cap_bytes'])")" >>"$OUT/pick.txt"
done
cp "$R/pick-1.json" "$OUT/"
cat "$OUT/pick.txt"
fi
