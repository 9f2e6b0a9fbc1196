# Sourced by the *_timings_h200.sh scripts: `run LABEL COMMAND...` runs one command timed,
# appending `== LABEL`, its stderr (the timings) and its time (wall, user, system) to
# $R/runs.txt.
TIMEFORMAT='%R s wall, %U s user, %S s system'
run() {
    local label=$1
    shift
    echo "== $label" >>"$R/runs.txt"
    { time "$@" >/dev/null 2>>"$R/runs.txt"; } 2>>"$R/runs.txt"
}
