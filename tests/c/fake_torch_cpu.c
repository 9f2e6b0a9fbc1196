/* A libtorch_cpu.so shaped like PyTorch's for the recorder's autograd-node test (tests/pyframes.rs,
 * through tests/py/autograd_node.py): it exports `std::shared_ptr<Node>
 * torch::autograd::get_current_node()` under its mangled name, returning the thread's current
 * node through the hidden result pointer as the Itanium C++ ABI returns a shared_ptr, with a
 * libstdc++-shaped control block (vtable, use count, weak count) whose use count it raises, and
 * nodes whose vtables have the type_info of an `MmBackward0` and an `AccumulateGrad` before them.
 * `fake_backward` runs an "engine" thread of a given name that allocates through the fake driver
 * while each node is current, and once with none. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

struct type_info { const void *vtable; const char *name; };
struct control { const void *vtable; int uses; int weak; };
struct node { const void *const *vtable; };
struct shared_ptr { struct node *node; struct control *control; };

static const struct type_info mm_type = {0, "N5torch8autograd9generated11MmBackward0E"};
static const struct type_info acc_type = {0, "N5torch8autograd14AccumulateGradE"};
static const void *const mm_vtable[2] = {&mm_type, 0};
static const void *const acc_vtable[2] = {&acc_type, 0};
static struct node mm = {&mm_vtable[1]};
static struct node acc = {&acc_vtable[1]};
/* One reference each, the engine guard's. */
static struct control mm_control = {0, 1, 1};
static struct control acc_control = {0, 1, 1};

static __thread struct shared_ptr current;

/* `_ZN5torch8autograd16get_current_nodeEv`: a copy of the thread's current node. */
void _ZN5torch8autograd16get_current_nodeEv(struct shared_ptr *out) {
    *out = current;
    if (current.control) __atomic_add_fetch(&current.control->uses, 1, __ATOMIC_ACQ_REL);
}

typedef int (*alloc_fn)(unsigned long long *, size_t);
static alloc_fn alloc;

struct job { const char *name; size_t size; };

static void allocate(size_t size) {
    unsigned long long p = 0;
    alloc(&p, size);
}

static void *engine(void *arg) {
    struct job *j = arg;
    pthread_setname_np(pthread_self(), j->name);
    current = (struct shared_ptr){&mm, &mm_control};
    allocate(j->size);
    allocate(j->size);
    current = (struct shared_ptr){&acc, &acc_control};
    allocate(2 * j->size);
    current = (struct shared_ptr){0, 0};
    allocate(3 * j->size);
    return NULL;
}

/* Runs the engine thread `name`, allocating `size`, `size`, 2 × `size` and 3 × `size` bytes; the
 * nodes' use counts afterwards (both 1 when every reference taken was given back) as
 * `mm * 10 + acc`, or -1. */
int fake_backward(const char *name, size_t size) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    alloc = h ? (alloc_fn)dlsym(h, "cuMemAlloc_v2") : NULL;
    if (!alloc) return -1;
    struct job j = {name, size};
    pthread_t t;
    if (pthread_create(&t, NULL, engine, &j) != 0 || pthread_join(t, NULL) != 0) return -1;
    return mm_control.uses * 10 + acc_control.uses;
}
