"""Allocates through the fake driver via ctypes from functions at known lines (tests/pyframes.rs).

Each allocation prints `site NAME LINE` first, naming the function and the line of its
`cuMemAlloc_v2` call, which the test then looks for in the trace's summary.
"""
import ctypes
import sys
import threading

from fake_driver import alloc


def here():
    return sys._getframe(1).f_lineno + 1


def make_weights():
    print("site make_weights", here(), flush=True)
    ptr = ctypes.c_uint64(); alloc(ctypes.byref(ptr), 1 << 20)


def activations():
    print("site activations", here(), flush=True)
    ptr = ctypes.c_uint64(); alloc(ctypes.byref(ptr), 3 << 20)


def deep(n):
    if n > 0:
        return deep(n - 1)
    print("site deep", here(), flush=True)
    ptr = ctypes.c_uint64(); alloc(ctypes.byref(ptr), 5 << 20)


def in_thread():
    print("site in_thread", here(), flush=True)
    ptr = ctypes.c_uint64(); alloc(ctypes.byref(ptr), 7 << 20)


make_weights()
activations()
deep(200)
t = threading.Thread(target=in_thread)
t.start()
t.join()
