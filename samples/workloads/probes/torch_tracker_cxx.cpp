// The reference tracker: attaches through PyTorch's own C++ API (compiled against the wheel's
// headers, linked with libc10_cuda), counting entries per action. torch_tracker_probe.py runs it
// beside torch_tracker_raw.c, which attaches the way the recorder does, without headers.
#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstdint>

using Entry = c10::cuda::CUDACachingAllocator::TraceEntry;

static std::atomic<unsigned long> counts[16];
static std::atomic<unsigned long> sizes[16];

extern "C" void vtx_attach() {
  c10::cuda::CUDACachingAllocator::get()->attachAllocatorTraceTracker([](const Entry& e) {
    unsigned a = static_cast<unsigned>(e.action_) & 15u;
    counts[a].fetch_add(1);
    sizes[a].fetch_add(static_cast<unsigned long>(e.size_));
  });
}

extern "C" void vtx_counts(unsigned long* out) {
  for (int i = 0; i < 16; i++) {
    out[i] = counts[i].load();
    out[16 + i] = sizes[i].load();
  }
}
