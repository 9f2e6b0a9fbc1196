#!/usr/bin/env bash
# Times two vramtrace binaries on one command, alternated: REPS repetitions, the order flipped
# each time (base first, then new first), each run under /usr/bin/time; prints every run and,
# per binary, the median wall and CPU (user + system) time and peak RSS with min–max.
#
#     bash analyzer/benches/alternate_report.sh BASE_BIN NEW_BIN REPS ARGS...
#
# e.g. `... 10 report snap.pickle`: each run is `BIN ARGS... -o DIR` with a directory of its
# own per binary.
set -u
base=$1 new=$2 reps=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$reps"); do
    if [ $((i % 2)) = 1 ]; then order="base new"; else order="new base"; fi
    for b in $order; do
        /usr/bin/time -f "$b %e %U %S %M" -a -o "$tmp/times" "${!b}" "$@" -o "$tmp/out-$b" \
            >/dev/null 2>&1
    done
done
cat "$tmp/times"
python3 - "$tmp/times" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.split()[0] in ("base", "new")]
for b in ("base", "new"):
    wall = [float(r[1]) for r in rows if r[0] == b]
    cpu = [float(r[2]) + float(r[3]) for r in rows if r[0] == b]
    rss = [int(r[4]) / 1000 for r in rows if r[0] == b]
    print(f"{b}: {len(wall)} runs, wall {statistics.median(wall):.3f} s "
          f"({min(wall):.2f}-{max(wall):.2f}), CPU {statistics.median(cpu):.3f} s "
          f"({min(cpu):.2f}-{max(cpu):.2f}), max RSS {statistics.median(rss):.1f} MB "
          f"({min(rss):.1f}-{max(rss):.1f})")
EOF
