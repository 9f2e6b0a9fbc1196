"""Allocates from two lines of one function in turn, then three times from a third line, then
from one line of a function called by two callers in turn (tests/pyframes.rs): the recorder
looks a capture up among its thread's recent stacks first, by the innermost frame, and must
still tell lines of one function, and callers of one line, apart.

Prints `line SIZE LINE` for each allocating line of `two_lines`, the size it allocates and its
line, and `caller SIZE NAME` for each caller of `inner`.
"""
import ctypes
import sys

from fake_driver import alloc


def here():
    return sys._getframe(1).f_lineno + 1


def two_lines(n):
    ptr = ctypes.c_uint64()
    print("line", 1 << 20, here() + 3, flush=True)
    print("line", 2 << 20, here() + 4, flush=True)
    for i in range(n):
        if i % 2 == 0:
            alloc(ctypes.byref(ptr), 1 << 20)
        else:
            alloc(ctypes.byref(ptr), 2 << 20)
    print("line", 3 << 20, here() + 1, flush=True)
    for _ in range(3):
        alloc(ctypes.byref(ptr), 3 << 20)


def inner(size):
    ptr = ctypes.c_uint64()
    alloc(ctypes.byref(ptr), size)


def caller_a():
    inner(4 << 20)


def caller_b():
    inner(5 << 20)


two_lines(6)
print("caller", 4 << 20, "caller_a", flush=True)
print("caller", 5 << 20, "caller_b", flush=True)
for _ in range(3):
    caller_a()
    caller_b()
