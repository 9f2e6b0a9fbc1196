// Prints, as JSON, the facts the recorder's PyTorch tracker relies on, compiled against the C++
// headers that ship with the installed PyTorch wheel (samples/workloads/h200/torch_tracker_probe.sh):
//   - the vtable slot of CUDAAllocator::attachAllocatorTraceTracker (and of initialized()),
//     read from a pointer to member function: in the Itanium C++ ABI its first word holds
//     1 + the byte offset of the slot in the vtable for a virtual function
//     (https://itanium-cxx-abi.github.io/cxx-abi/abi.html#member-function-pointers);
//   - sizeof(TraceEntry) and the offset of each field it has (-1: no such field);
//   - the values of TraceEntry::Action (-1: no such value);
//   - sizeof(std::function<void(const TraceEntry&)>) and the libstdc++ string ABI in use.
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

using c10::cuda::CUDACachingAllocator::CUDAAllocator;
using Entry = c10::cuda::CUDACachingAllocator::TraceEntry;

#define FIELD(name)                                                                     \
  template <class T, class = void>                                                      \
  struct has_##name : std::false_type {};                                              \
  template <class T>                                                                    \
  struct has_##name<T, std::void_t<decltype(&T::name)>> : std::true_type {};           \
  template <class T>                                                                    \
  long off_##name() {                                                                   \
    if constexpr (has_##name<T>::value) {                                               \
      return static_cast<long>(offsetof(T, name));                                      \
    } else {                                                                            \
      return -1;                                                                        \
    }                                                                                   \
  }                                                                                     \
  template <class T>                                                                    \
  long size_##name() {                                                                  \
    if constexpr (has_##name<T>::value) {                                               \
      return static_cast<long>(sizeof(T::name));                                        \
    } else {                                                                            \
      return -1;                                                                        \
    }                                                                                   \
  }

#define ACTION(name)                                                                    \
  template <class T, class = void>                                                      \
  struct act_##name : std::false_type {};                                              \
  template <class T>                                                                    \
  struct act_##name<T, std::void_t<decltype(T::name)>> : std::true_type {};            \
  template <class T>                                                                    \
  long val_##name() {                                                                   \
    if constexpr (act_##name<T>::value) {                                               \
      return static_cast<long>(T::name);                                                \
    } else {                                                                            \
      return -1;                                                                        \
    }                                                                                   \
  }

FIELD(action_)
FIELD(device_)
FIELD(addr_)
FIELD(context_)
FIELD(stream_)
FIELD(size_)
FIELD(mempool_)
FIELD(time_)
FIELD(compile_context_)
FIELD(user_metadata_)
ACTION(ALLOC)
ACTION(FREE_REQUESTED)
ACTION(FREE_COMPLETED)
ACTION(SEGMENT_ALLOC)
ACTION(SEGMENT_FREE)
ACTION(SEGMENT_MAP)
ACTION(SEGMENT_UNMAP)
ACTION(SNAPSHOT)
ACTION(OOM)

template <class P>
long slot_of(P pm) {
  static_assert(sizeof(P) == 2 * sizeof(std::uintptr_t), "Itanium member pointer");
  std::uintptr_t raw[2];
  std::memcpy(raw, &pm, sizeof raw);
  if ((raw[0] & 1) == 0) return -1;  // not virtual
  return static_cast<long>((raw[0] - 1) / sizeof(void*));
}

int main() {
  std::printf("{\n");
#ifdef TORCH_VERSION
  std::printf("  \"torch_version_header\": \"%s\",\n", TORCH_VERSION);
#endif
  std::printf("  \"cxx11_abi\": %d,\n", _GLIBCXX_USE_CXX11_ABI);
  std::printf("  \"gcc\": \"%s\",\n", __VERSION__);
  std::printf("  \"slot_attachAllocatorTraceTracker\": %ld,\n",
              slot_of(&CUDAAllocator::attachAllocatorTraceTracker));
  std::printf("  \"slot_initialized\": %ld,\n", slot_of(&CUDAAllocator::initialized));
  std::printf("  \"slot_name\": %ld,\n", slot_of(&CUDAAllocator::name));
  std::printf("  \"slot_emptyCache\": %ld,\n", slot_of(&CUDAAllocator::emptyCache));
  std::printf("  \"slot_getMemoryFraction\": %ld,\n",
              slot_of(&CUDAAllocator::getMemoryFraction));
  std::printf("  \"slot_setMemoryFraction\": %ld,\n",
              slot_of(&CUDAAllocator::setMemoryFraction));
  std::printf("  \"sizeof_TraceEntry\": %zu,\n", sizeof(Entry));
  std::printf("  \"sizeof_std_function\": %zu,\n",
              sizeof(std::function<void(const Entry&)>));
  std::printf("  \"sizeof_std_string\": %zu,\n", sizeof(std::string));
#define P(f) std::printf("  \"off_" #f "\": %ld, \"size_" #f "\": %ld,\n", off_##f<Entry>(), size_##f<Entry>());
  P(action_) P(device_) P(addr_) P(context_) P(stream_) P(size_) P(mempool_) P(time_)
  P(compile_context_) P(user_metadata_)
#define A(a) std::printf("  \"action_" #a "\": %ld,\n", val_##a<Entry>());
  A(ALLOC) A(FREE_REQUESTED) A(FREE_COMPLETED) A(SEGMENT_ALLOC) A(SEGMENT_FREE)
  A(SEGMENT_MAP) A(SEGMENT_UNMAP) A(SNAPSHOT) A(OOM)
  std::printf("  \"end\": 0\n}\n");
  return 0;
}
