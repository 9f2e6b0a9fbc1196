"""Stress for the frame walk (tests/pyframes.rs): threads allocate from deep and short-lived
frames (functions made by exec and dropped at once, generators, recursion) while other threads
create and free frames and code objects as fast as they can; one allocation comes from a thread
with no Python thread state. Prints `allocations N` with the number of cuMemAlloc_v2 calls made
from Python."""
import ctypes
import sys
import threading

from fake_driver import alloc
native = ctypes.CDLL(sys.argv[1])
ROUNDS = int(sys.argv[2])
made = [0] * 8


def one(slot):
    ptr = ctypes.c_uint64()
    alloc(ctypes.byref(ptr), 4096)
    made[slot] += 1


def recurse(n, slot):
    if n:
        return recurse(n - 1, slot)
    one(slot)


def generator(slot):
    yield one(slot)


def allocating(slot):
    for i in range(ROUNDS):
        # A function whose code object dies right after the call.
        scope = {"one": one}
        exec(f"def short_lived_{i % 7}(s):\n    one(s)\n", scope)
        scope[f"short_lived_{i % 7}"](slot)
        del scope
        recurse(i % 50, slot)
        for _ in generator(slot):
            pass


stop = False


def churning():
    # Frames and code objects created and freed while the others walk theirs.
    while not stop:
        exec(compile("def f(x):\n    return [x for x in range(3)]\nf(1)\n", "<churn>", "exec"), {})


churners = [threading.Thread(target=churning) for _ in range(2)]
workers = [threading.Thread(target=allocating, args=(s,)) for s in range(4)]
for t in churners + workers:
    t.start()
for t in workers:
    t.join()
stop = True
for t in churners:
    t.join()
assert native.alloc_from_native_thread(8192) == 0
print("allocations", sum(made), flush=True)
