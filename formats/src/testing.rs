//! proptest strategies shared by this crate's tests.

use crate::api::Api;
use crate::event::Event;
use proptest::prelude::*;

pub fn arb_api() -> impl Strategy<Value = Api> {
    proptest::sample::select(Api::ALL)
}

pub fn arb_event() -> impl Strategy<Value = Event> {
    (
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<i32>(),
        ),
        (
            arb_api(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        ),
    )
        .prop_map(
            |(
                (seq, time_ns, duration_ns, pid, tid, device),
                (api, result, address, size, handle),
                (aux, stream, pool, flags, stack),
            )| Event {
                seq,
                time_ns,
                duration_ns,
                pid,
                tid,
                device,
                api,
                result,
                address,
                size,
                handle,
                aux,
                stream,
                pool,
                flags,
                stack,
            },
        )
}
