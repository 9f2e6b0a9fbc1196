//! `lower-bound`: a perfect allocator that holds exactly the live requested bytes.
//!
//! No real allocator can reserve less (docs/allocators.md §8: `LB = max_t Σ size(live at
//! t)`); its `fit` is the smallest device any allocator could run the trace on.

use super::{AddressMap, BlockSpan, Device, Policy, Refused};
use super::{BuildContext, OptionError, Options, PolicyInfo};

pub const INFO: PolicyInfo = PolicyInfo {
    name: "lower-bound",
    summary: "bound: holds exactly the live requested bytes (peak = max over time of requested)",
    keys: &[],
    build,
};

fn build(_: &Options, _: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    Ok(Box::new(LowerBound::default()))
}

#[derive(Debug, Default)]
pub struct LowerBound {
    sizes: Vec<u64>,
    allocated: u64,
}

impl Policy for LowerBound {
    fn malloc(&mut self, slot: u32, size: u64, _: u32, driver: &mut Device) -> Result<(), Refused> {
        if !driver.hold(size) {
            return Err(Refused);
        }
        let slot = slot as usize;
        if self.sizes.len() <= slot {
            self.sizes.resize(slot + 1, 0);
        }
        self.sizes[slot] = size;
        self.allocated += size;
        Ok(())
    }

    fn free(&mut self, slot: u32, driver: &mut Device) {
        let size = std::mem::take(&mut self.sizes[slot as usize]);
        driver.release(size);
        self.allocated -= size;
    }

    fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Packed end to end in slot order: the bound has no real layout.
    fn address_map_into(&self, map: &mut AddressMap) {
        let mut address = 0;
        for (slot, &size) in self.sizes.iter().enumerate() {
            if size > 0 {
                map.blocks.push(BlockSpan {
                    address,
                    size,
                    slot: Some(slot as u32),
                });
                address += size;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel};

    #[test]
    fn reserved_is_exactly_the_live_requested_bytes() {
        let mut p = LowerBound::default();
        let mut d = Driver::new(DriverModel { capacity: 1000 });
        p.malloc(0, 600, 0, &mut d.device()).unwrap();
        p.malloc(1, 400, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 1000);
        assert_eq!(p.malloc(2, 1, 0, &mut d.device()), Err(Refused));
        p.free(0, &mut d.device());
        assert_eq!((d.reserved(), p.allocated()), (400, 400));
    }
}
