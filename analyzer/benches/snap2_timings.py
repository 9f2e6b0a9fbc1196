#!/usr/bin/env python3
"""Medians of `vramtrace report --timings` runs, per label, from the runs.txt that
samples/workloads/h200/snap2_timings_h200.sh writes (`== LABEL N` blocks of timing lines and a
`bash time` line): each stage's start in ms since the command started, median (min-max), the
search's duration (its start to its end) and the trace side's (the search's start to the main
thread's wait for it), wall and CPU.

    python3 analyzer/benches/snap2_timings.py analyzer/benches/results/snap2_timings_h200_2026-12-03_final.txt
"""
import re,sys,statistics as st
txt=open(sys.argv[1]).read()
blocks=re.split(r'^== ',txt,flags=re.M)[1:]
groups={}
for b in blocks:
    lines=b.strip().split('\n')
    label=re.sub(r' \d+$','',lines[0])
    marks={}
    for l in lines[1:]:
        m=re.match(r'vramtrace: \[\s*([\d.]+) ms\] (.*)',l)
        if m:
            k=m.group(2)
            if k[0].isdigit(): k='(events line)'
            if k.startswith('replaying'): k='replaying ...'
            if k.startswith('opening'): k='opening'
            marks[k]=float(m.group(1))
        m=re.match(r'([\d.]+) s wall, ([\d.]+) s user, ([\d.]+) s system',l)
        if m: marks['WALL']=float(m.group(1))*1000; marks['CPU (user+sys)']=(float(m.group(2))+float(m.group(3)))*1000
    groups.setdefault(label,[]).append(marks)
for label,runs in groups.items():
    print('##',label,f'({len(runs)} runs; ms since start, median (min-max))')
    for k in runs[0]:
        v=[r[k] for r in runs if k in r]
        print(f"  {k:45s} {st.median(v):7.1f} ({min(v):.1f}-{max(v):.1f})")
    if 'the header\'s search: done' in runs[0]:
        d=[r["the header's search: done"]-r["the header's search: started"] for r in runs]
        print(f"  {'= search duration':45s} {st.median(d):7.1f} ({min(d):.1f}-{max(d):.1f})")
        d=[r["waiting for the header's search"]-r["the header's search: started"] for r in runs]
        print(f"  {'= trace side duration':45s} {st.median(d):7.1f} ({min(d):.1f}-{max(d):.1f})")
