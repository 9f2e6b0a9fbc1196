//! The ordering calls (formats/SPEC.md §4.4): synchronizations, queries with their answers, event
//! records and stream waits reach the fake driver every way a program calls them, and each is one
//! event with its stream, event and flags, no stack.

use vramtrace_format::{Api, Event, NO_STACK};
use vramtrace_tests::*;

/// (api, stream, event, flags, result) of every ordering event of `client LOADER sync`.
fn ordering(loader: &str) -> Vec<(Api, u64, u64, u64, u32)> {
    let a = artifacts();
    let dir = scratch(&format!("sync-{loader}"));
    let program = if loader == "linked" {
        &a.client_linked
    } else {
        &a.client
    };
    let out = recorded(&dir.join(""), program, &[loader, "sync"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    let events: Vec<Event> = open(&traces[0]).events().collect();
    let pool: Vec<Api> = events
        .iter()
        .filter(|e| !e.api.orders())
        .map(|e| e.api)
        .collect();
    assert_eq!(
        pool.len(),
        3,
        "two allocations and a free around them: {pool:?}"
    );
    assert!(
        events
            .iter()
            .all(|e| e.stack == NO_STACK || !e.api.orders())
    );
    assert!(events.iter().all(|e| e.device == 1), "context of device 1");
    events
        .iter()
        .filter(|e| e.api.orders())
        .map(|e| (e.api, e.stream, e.handle, e.flags, e.result))
        .collect()
}

fn expected(ptsz: bool) -> Vec<(Api, u64, u64, u64, u32)> {
    let p = |plain: Api, per_thread: Api| if ptsz { per_thread } else { plain };
    vec![
        (
            p(Api::CuEventRecord, Api::CuEventRecord_ptsz),
            0x5007,
            0xe1,
            0,
            0,
        ),
        (
            p(
                Api::CuEventRecordWithFlags,
                Api::CuEventRecordWithFlags_ptsz,
            ),
            0x5008,
            0xe2,
            1,
            0,
        ),
        (
            p(Api::CuStreamWaitEvent, Api::CuStreamWaitEvent_ptsz),
            0x5008,
            0xe1,
            0,
            0,
        ),
        (
            p(Api::CuStreamQuery, Api::CuStreamQuery_ptsz),
            0x5007,
            0,
            0,
            0,
        ),
        (
            p(Api::CuStreamQuery, Api::CuStreamQuery_ptsz),
            0x5009,
            0,
            0,
            600,
        ),
        (Api::CuEventQuery, 0, 0xe1, 0, 0),
        (Api::CuEventQuery, 0, 0xe9, 0, 600),
        (Api::CuEventSynchronize, 0, 0xe1, 0, 0),
        (
            p(Api::CuStreamSynchronize, Api::CuStreamSynchronize_ptsz),
            0x5007,
            0,
            0,
            0,
        ),
        (Api::CuCtxSynchronize, 0, 0, 0, 0),
        (Api::CuCtxSynchronize_v2, 0, 0, 0, 0),
    ]
}

#[test]
fn ordering_calls_are_recorded_for_a_program_linked_with_lcuda() {
    assert_eq!(ordering("linked"), expected(false));
}

#[test]
fn ordering_calls_are_recorded_through_dlsym_of_versioned_names() {
    assert_eq!(ordering("dlsym"), expected(false));
}

#[test]
fn ordering_calls_are_recorded_through_cu_get_proc_address_with_flag_2_as_ptsz() {
    assert_eq!(ordering("gpa"), expected(true));
}
