//! PyTorch's `TraceEntry`, the record its CUDA caching allocator hands to an attached trace
//! tracker: the layouts the recorder knows, per PyTorch version, and how one entry becomes an
//! event (formats/SPEC.md §4.2).
//!
//! The layouts are facts about compiled PyTorch wheels, measured rather than read from a
//! header: `samples/workloads/probes/torch_tracker_layout.cpp` prints them when compiled against a
//! wheel's own headers (`docs/torch-tracker.md` has the output for 2.11). A version without a
//! row here is refused: the recorder falls back to the driver calls alone.

use crate::{Api, Event, NO_DEVICE};

/// Where a PyTorch build keeps what the recorder needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TorchLayout {
    /// `major.minor.` prefix of the versions this row is for.
    pub version_prefix: &'static str,
    /// The mangled name of the exported `std::atomic<CUDAAllocator*>`
    /// (`c10::cuda::CUDACachingAllocator::allocator`).
    pub allocator_symbol: &'static str,
    /// The mangled type name (`std::type_info::name`) of the native caching allocator: only it
    /// is attached to (the `cudaMallocAsync` back-end has its own requests in the driver calls).
    pub native_type_name: &'static str,
    /// Vtable slot of `CUDAAllocator::attachAllocatorTraceTracker(AllocatorTraceTracker)`.
    pub slot_attach: usize,
    /// Vtable slot of `CUDAAllocator::initialized()`.
    pub slot_initialized: usize,
    /// Vtable slot of `DeviceAllocator::emptyCache(MempoolId_t)`.
    pub slot_empty_cache: usize,
    /// Vtable slot of `CUDAAllocator::getMemoryFraction(DeviceIndex)`.
    pub slot_get_memory_fraction: usize,
    /// Vtable slot of `CUDAAllocator::setMemoryFraction(double, DeviceIndex)`.
    pub slot_set_memory_fraction: usize,
    /// Where a `TraceEntry`'s fields are.
    pub entry: EntryLayout,
}

/// The size of a `TraceEntry` and the byte offsets of its fields: `action_` (i32), `device_`
/// (i8), `addr_`, `stream_`, `size_` (u64 each) and `mempool_` (two u64). Each is below 256 in
/// every known version, so the whole layout packs into one word ([`EntryLayout::to_word`]),
/// which the recorder keeps in the one cache line its hooks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryLayout {
    /// `sizeof(TraceEntry)`.
    pub size_of: u8,
    pub action: u8,
    pub device: u8,
    pub addr: u8,
    pub stream: u8,
    pub size: u8,
    pub mempool: u8,
}

/// Every layout the recorder was proven against on a GPU.
pub const TORCH_LAYOUTS: &[TorchLayout] = &[TorchLayout {
    version_prefix: "2.11.",
    allocator_symbol: "_ZN3c104cuda20CUDACachingAllocator9allocatorE",
    native_type_name: "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE",
    slot_attach: 44,
    slot_initialized: 6,
    slot_empty_cache: 7,
    slot_get_memory_fraction: 17,
    slot_set_memory_fraction: 18,
    entry: EntryLayout {
        size_of: 136,
        action: 0,
        device: 4,
        addr: 8,
        stream: 32,
        size: 40,
        mempool: 48,
    },
}];

/// `CUDA_ERROR_OUT_OF_MEMORY`, the result of an event made from an `OOM` entry.
const OUT_OF_MEMORY: u32 = 2;

impl TorchLayout {
    /// The layout for PyTorch `version` (`2.11.0+cu130`), if known.
    pub fn for_version(version: &str) -> Option<&'static TorchLayout> {
        TORCH_LAYOUTS
            .iter()
            .find(|l| version.starts_with(l.version_prefix))
    }

    /// The event kind of an entry's action, if it is one the trace keeps (`SNAPSHOT` is not).
    /// `OOM` is a refused `torch.alloc`.
    pub fn api_of(action: i32) -> Option<(Api, u32)> {
        Some(match action {
            0 => (Api::TorchAlloc, 0),
            1 => (Api::TorchFreeRequested, 0),
            2 => (Api::TorchFreeCompleted, 0),
            3 => (Api::TorchSegmentAlloc, 0),
            4 => (Api::TorchSegmentFree, 0),
            5 => (Api::TorchSegmentMap, 0),
            6 => (Api::TorchSegmentUnmap, 0),
            8 => (Api::TorchAlloc, OUT_OF_MEMORY),
            _ => return None,
        })
    }
}

impl EntryLayout {
    /// The layout as one word, byte `i` the `i`-th field (never 0: `size_of` is not).
    pub const fn to_word(self) -> u64 {
        u64::from_le_bytes([
            self.size_of,
            self.action,
            self.device,
            self.addr,
            self.stream,
            self.size,
            self.mempool,
            0,
        ])
    }

    /// The layout [`EntryLayout::to_word`] packed.
    pub const fn from_word(word: u64) -> EntryLayout {
        let b = word.to_le_bytes();
        EntryLayout {
            size_of: b[0],
            action: b[1],
            device: b[2],
            addr: b[3],
            stream: b[4],
            size: b[5],
            mempool: b[6],
        }
    }

    /// The action of the entry `bytes` (at least [`EntryLayout::size_of`] long).
    pub fn action_of(&self, bytes: &[u8]) -> Option<i32> {
        let at = usize::from(self.action);
        Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    }

    /// The event an entry stands for, all fields but those of the recording (time, process,
    /// thread, stack, seq). `None` for an action the trace does not keep or a short slice.
    pub fn decode(&self, bytes: &[u8]) -> Option<Event> {
        let u64_at = |o: u8| -> Option<u64> {
            let o = usize::from(o);
            Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
        };
        let (api, result) = TorchLayout::api_of(self.action_of(bytes)?)?;
        let device = *bytes.get(usize::from(self.device))? as i8;
        let addr = u64_at(self.addr)?;
        let oom = result == OUT_OF_MEMORY;
        Some(Event {
            device: if device < 0 {
                NO_DEVICE
            } else {
                i32::from(device)
            },
            result,
            address: if oom { 0 } else { addr },
            aux: if oom { addr } else { 0 },
            size: u64_at(self.size)?,
            stream: u64_at(self.stream)?,
            pool: u64_at(self.mempool)?,
            handle: u64_at(self.mempool.checked_add(8)?)?,
            ..Event::new(api)
        })
    }
}

/// The version in the text of `torch/version.py` (`__version__ = '2.11.0+cu130'`) or of a
/// libtorch distribution's `build-version` file (`2.11.0+cu130`).
pub fn parse_torch_version(text: &str) -> Option<&str> {
    let v = match text
        .lines()
        .find_map(|l| l.trim().strip_prefix("__version__"))
    {
        Some(rest) => rest
            .trim_start()
            .strip_prefix('=')?
            .trim()
            .trim_matches(|c| c == '\'' || c == '"'),
        None => text.lines().next()?.trim(),
    };
    (v.starts_with(|c: char| c.is_ascii_digit()) && v.contains('.')).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(l: &EntryLayout, action: i32, device: i8, addr: u64, size: u64) -> Vec<u8> {
        let at = |o: u8| usize::from(o);
        let (action_at, addr_at, stream_at) = (at(l.action), at(l.addr), at(l.stream));
        let (size_at, mempool_at) = (at(l.size), at(l.mempool));
        let mut b = vec![0u8; at(l.size_of)];
        b[action_at..action_at + 4].copy_from_slice(&action.to_le_bytes());
        b[at(l.device)] = device as u8;
        b[addr_at..addr_at + 8].copy_from_slice(&addr.to_le_bytes());
        b[stream_at..stream_at + 8].copy_from_slice(&0x55u64.to_le_bytes());
        b[size_at..size_at + 8].copy_from_slice(&size.to_le_bytes());
        b[mempool_at..mempool_at + 8].copy_from_slice(&1u64.to_le_bytes());
        b[mempool_at + 8..mempool_at + 16].copy_from_slice(&2u64.to_le_bytes());
        b
    }

    #[test]
    fn the_2_11_layout_decodes_every_action_it_keeps() {
        let l = &TorchLayout::for_version("2.11.0+cu130")
            .expect("2.11 is known")
            .entry;
        let e = l.decode(&entry(l, 0, 1, 0x7f00, 3_145_733)).unwrap();
        assert_eq!(e.api, Api::TorchAlloc);
        assert_eq!((e.device, e.address, e.size), (1, 0x7f00, 3_145_733));
        assert_eq!((e.stream, e.pool, e.handle, e.result), (0x55, 1, 2, 0));
        let kinds: Vec<Option<Api>> = (0..10)
            .map(|a| l.decode(&entry(l, a, 0, 8, 8)).map(|e| e.api))
            .collect();
        assert_eq!(
            kinds,
            [
                Some(Api::TorchAlloc),
                Some(Api::TorchFreeRequested),
                Some(Api::TorchFreeCompleted),
                Some(Api::TorchSegmentAlloc),
                Some(Api::TorchSegmentFree),
                Some(Api::TorchSegmentMap),
                Some(Api::TorchSegmentUnmap),
                None,
                Some(Api::TorchAlloc),
                None,
            ]
        );
    }

    #[test]
    fn an_oom_entry_is_a_refused_alloc_with_the_free_bytes_in_aux() {
        let l = &TORCH_LAYOUTS[0].entry;
        let e = l.decode(&entry(l, 8, 0, 12345, 1 << 40)).unwrap();
        assert_eq!((e.api, e.result), (Api::TorchAlloc, 2));
        assert_eq!((e.address, e.aux, e.size), (0, 12345, 1 << 40));
    }

    #[test]
    fn short_entries_and_unknown_versions_are_refused() {
        let l = &TORCH_LAYOUTS[0].entry;
        assert_eq!(l.decode(&entry(l, 0, 0, 1, 1)[..40]), None);
        assert_eq!(TorchLayout::for_version("2.10.0"), None);
        assert_eq!(TorchLayout::for_version("2.1.0"), None);
        let e = l.decode(&entry(l, 0, -1, 1, 1)).unwrap();
        assert_eq!(e.device, NO_DEVICE);
    }

    #[test]
    fn every_known_layout_packs_into_one_word_and_back() {
        for l in TORCH_LAYOUTS {
            assert_ne!(l.entry.to_word(), 0);
            assert_eq!(EntryLayout::from_word(l.entry.to_word()), l.entry);
        }
    }

    #[test]
    fn versions_are_read_from_version_py_and_build_version() {
        let py = "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n";
        assert_eq!(parse_torch_version(py), Some("2.11.0+cu130"));
        assert_eq!(parse_torch_version("2.11.0+cu130\n"), Some("2.11.0+cu130"));
        assert_eq!(parse_torch_version("garbage"), None);
        assert_eq!(parse_torch_version(""), None);
    }
}
