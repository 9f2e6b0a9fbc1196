//! What an ordering call of the trace (formats/SPEC.md §4.4) tells a stream-ordered pool.

use super::request::Order;
use vramtrace_format::{Api, Event};

/// The order `e` establishes, if any: a synchronization or a query that answered done (a
/// failed call, or a query of unfinished work, tells nothing), an event record or a stream
/// wait.
pub fn order_of(e: &Event) -> Option<Order> {
    if !e.succeeded() {
        return None;
    }
    Some(match e.api {
        Api::CuCtxSynchronize | Api::CuCtxSynchronize_v2 => Order::Device,
        Api::CuStreamSynchronize
        | Api::CuStreamSynchronize_ptsz
        | Api::CuStreamQuery
        | Api::CuStreamQuery_ptsz => Order::Stream,
        Api::CuEventSynchronize | Api::CuEventQuery => Order::Event,
        Api::CuEventRecord
        | Api::CuEventRecord_ptsz
        | Api::CuEventRecordWithFlags
        | Api::CuEventRecordWithFlags_ptsz => Order::Record,
        Api::CuStreamWaitEvent | Api::CuStreamWaitEvent_ptsz => Order::Wait,
        _ => return None,
    })
}

/// Whether `order` names a stream (its event is then the call's `handle` where it has one).
pub fn has_stream(order: Order) -> bool {
    matches!(order, Order::Stream | Order::Record | Order::Wait)
}

/// Whether `order` names an event.
pub fn has_event(order: Order) -> bool {
    matches!(order, Order::Event | Order::Record | Order::Wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CUDA_ERROR_NOT_READY`: a query of work not yet done.
    const CUDA_ERROR_NOT_READY: u32 = 600;

    #[test]
    fn a_query_of_unfinished_work_or_a_failed_call_orders_nothing() {
        let mut e = Event::new(Api::CuStreamQuery);
        assert_eq!(order_of(&e), Some(Order::Stream));
        e.result = CUDA_ERROR_NOT_READY;
        assert_eq!(order_of(&e), None);
        let mut e = Event::new(Api::CuEventSynchronize);
        e.result = 400;
        assert_eq!(order_of(&e), None);
        assert_eq!(order_of(&Event::new(Api::CuMemFreeAsync)), None);
        assert_eq!(
            order_of(&Event::new(Api::CuStreamWaitEvent_ptsz)),
            Some(Order::Wait)
        );
    }
}
