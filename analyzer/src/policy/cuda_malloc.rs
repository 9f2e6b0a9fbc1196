//! `cuda-malloc`: no caching; every request is one `cudaMalloc`, every free one `cudaFree`.
//!
//! What a program gets with `PYTORCH_NO_CUDA_MEMORY_CACHING=1` or JAX's
//! `XLA_PYTHON_CLIENT_ALLOCATOR=platform` (docs/allocators.md §9). Placement and physical
//! granularity are the driver model's ([`crate::policy::driver`]): requests of at most 1 MiB
//! share 2 MiB pages at 512 B alignment, larger ones take whole 2 MiB pages, as measured on the
//! H200 (`docs/h200-measurements.md`).

use super::Driver;
use super::driver::PAGE;
use super::support::slots::SlotTable;
use super::{AddressMap, BlockSpan, Device, Policy, Refused, Span};
use super::{BuildContext, OptionError, Options, PolicyInfo};

pub const INFO: PolicyInfo = PolicyInfo {
    name: "cuda-malloc",
    summary: "no caching: one cudaMalloc/cudaFree per request (driver granularity: <=1 MiB packed into 2 MiB pages, larger rounded to 2 MiB)",
    keys: &[],
    build,
};

fn build(_: &Options, _: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    Ok(Box::new(CudaMalloc::default()))
}

#[derive(Debug, Default)]
pub struct CudaMalloc {
    /// Per live slot: (address, requested size).
    live: SlotTable<(u64, u64)>,
}

impl Policy for CudaMalloc {
    fn malloc(&mut self, slot: u32, size: u64, _: u32, driver: &mut Device) -> Result<(), Refused> {
        let address = driver.malloc(size).ok_or(Refused)?;
        self.live
            .insert(slot, (address, size), Driver::malloc_footprint(size));
        Ok(())
    }

    fn free(&mut self, slot: u32, driver: &mut Device) {
        let (address, size) = self.live.remove(slot);
        driver.free(address, size);
    }

    fn allocated(&self) -> u64 {
        self.live.allocated()
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        for (slot, &(address, size)) in self.live.iter() {
            if size == 0 {
                continue;
            }
            let footprint = Driver::malloc_footprint(size);
            map.blocks.push(BlockSpan {
                address,
                size: footprint,
                slot: Some(slot as u32),
            });
            let page = address & !(PAGE - 1);
            let span = if footprint < PAGE {
                Span {
                    address: page,
                    size: PAGE,
                }
            } else {
                Span {
                    address,
                    size: footprint,
                }
            };
            map.segments.push(span);
        }
        map.segments.sort_by_key(|s| s.address);
        map.segments.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel, driver::MIB};

    #[test]
    fn every_request_is_a_driver_call_at_driver_granularity() {
        let mut p = CudaMalloc::default();
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 1000, 0, &mut d.device()).unwrap();
        p.malloc(1, 3 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 2 * MIB + 4 * MIB);
        assert_eq!(p.allocated(), 1024 + 4 * MIB);
        p.free(1, &mut d.device());
        assert_eq!(d.reserved(), 2 * MIB);
        assert_eq!((d.device_allocs(), d.device_frees()), (2, 1));
    }
}
