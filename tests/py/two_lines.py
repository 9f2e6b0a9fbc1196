"""Allocates from two lines of one function in turn, then three times from a third line
(tests/pyframes.rs): the recorder compares a capture with its thread's last stack first, and
must still tell lines of one function apart.

Prints `line SIZE LINE` for each allocating line: the size it allocates, and its line.
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


two_lines(6)
