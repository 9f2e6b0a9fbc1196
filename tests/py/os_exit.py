"""Allocates from three lines, then ends with os._exit, which runs no destructor
(tests/pyframes.rs): the trace must still hold every event's stack."""
import ctypes
import os

from fake_driver import alloc

ptr = ctypes.c_uint64()
alloc(ctypes.byref(ptr), 1 << 20)
alloc(ctypes.byref(ptr), 2 << 20)
alloc(ctypes.byref(ptr), 3 << 20)
os._exit(0)
