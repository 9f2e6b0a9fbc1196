"""Allocates 2 times, pauses the recorder (`vramtrace_set_paused`, recorder/src/pause.rs),
allocates 3 times, resumes, allocates once more: the trace must hold 3 allocations
(tests/pyframes.rs). Prints what the switch returned, in order."""
import ctypes

from fake_driver import alloc

switch = ctypes.CDLL(None).vramtrace_set_paused


def allocate(n):
    for _ in range(n):
        ptr = ctypes.c_uint64()
        alloc(ctypes.byref(ptr), 1 << 20)


allocate(2)
print("was", switch(1), flush=True)
allocate(3)
print("was", switch(0), flush=True)
allocate(1)
