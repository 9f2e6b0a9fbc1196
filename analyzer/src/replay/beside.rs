//! One policy's replay of a request stream while the load still builds it: the requests go to
//! the policy on a thread of its own as the model makes them, so that a single-policy `replay`
//! need not wait for the whole trace.
//!
//! The model settles two things only once it has seen every event ([`crate::model::Loader`]'s
//! `finish`): which driver calls bypassed the framework's allocator (set aside, not replayed),
//! and the CUDA streams' numbers (in handle order). The replay here takes the requests as first
//! seen, on the guess that nothing will be set aside and that the handles come in rising order,
//! and builds its policy from what the stream has said when its first request comes (the
//! device's memory, no recorded segment). [`Beside::finish`] checks each guess against the
//! finished stream and gives no result when one failed: the caller then replays the finished
//! stream, so the figures are always those of a replay after the load.

use super::input::ReplayInput;
use super::parallel::{RunResult, run_requests};
use super::prepare::{Limits, capacity};
use crate::model::{Growing, Request, RequestStream, StreamKey};
use crate::policy::{AddressOrder, PolicySpec, READ_THE_STREAM};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;
use vramtrace_format::Device;

/// Blocks of requests queued for the replay's thread: room for the model to run ahead while the
/// policy works through a block.
const BLOCKS_IN_FLIGHT: usize = 4;

/// A replay of one policy fed as the stream grows ([`Beside::feed`]).
pub struct Beside {
    spec: PolicySpec,
    devices: Vec<Device>,
    limits: Limits,
    state: State,
}

enum State {
    /// No request yet.
    Waiting,
    Running(Running),
    /// A second (process, device) began: the replays need the finished model.
    Stopped,
}

/// The replay under way and the guesses it runs on.
struct Running {
    key: StreamKey,
    device_total: Option<u64>,
    capacity: u64,
    /// Requests sent so far.
    sent: usize,
    /// The CUDA stream handles in first-seen order, as last fed.
    handles: Vec<u64>,
    tx: SyncSender<Vec<Request>>,
    thread: JoinHandle<Option<super::Outcome>>,
}

impl Beside {
    /// A replay of `spec` at the capacity [`capacity`] gives its stream's device among `devices`
    /// under `limits`; `None` for a policy that needs the whole stream to start
    /// ([`READ_THE_STREAM`]).
    pub fn new(spec: &PolicySpec, devices: &[Device], limits: Limits) -> Option<Beside> {
        (!READ_THE_STREAM.contains(&spec.name.as_str())).then(|| Beside {
            spec: spec.clone(),
            devices: devices.to_vec(),
            limits,
            state: State::Waiting,
        })
    }

    /// Sends the policy the requests `growing` ([`crate::model::Loader::growing`]) holds that
    /// it has not had yet; `None` once the load has begun a second stream, which stops it.
    pub fn feed(&mut self, growing: Option<Growing>) {
        match (&mut self.state, growing) {
            (State::Stopped, _) | (State::Waiting, None) => {}
            (State::Running(_), None) => self.state = State::Stopped,
            (State::Waiting, Some(g)) if !g.requests.is_empty() => {
                let mut running = self.start(&g);
                running.feed(&g);
                self.state = State::Running(running);
            }
            (State::Waiting, Some(_)) => {}
            (State::Running(r), Some(g)) => r.feed(&g),
        }
    }

    /// The replay's thread, its policy built from what stream `g` has said so far.
    fn start(&self, g: &Growing) -> Running {
        let (tx, rx) = sync_channel::<Vec<Request>>(BLOCKS_IN_FLIGHT);
        let capacity = capacity(&self.devices, g.key.device, self.limits).0;
        let stream = RequestStream {
            key: Some(g.key),
            device_total: g.device_total,
            ..RequestStream::from_requests(Vec::new())
        };
        let spec = self.spec.clone();
        let thread = std::thread::spawn(move || {
            let requests = rx.into_iter().flatten();
            run_requests(&stream, requests, &spec, capacity, AddressOrder::Rising).ok()
        });
        Running {
            key: g.key,
            device_total: g.device_total,
            capacity,
            sent: 0,
            handles: Vec::new(),
            tx,
            thread,
        }
    }

    /// The replay's result, as [`super::replay_all`] gives it for `input`'s one stream and this
    /// policy, when every guess held for `input` (the load's finished stream prepared); `None`
    /// when one failed or the policy could not be built (replaying `input` says why).
    pub fn finish(self, input: &ReplayInput) -> Option<RunResult> {
        let State::Running(r) = self.state else {
            return None;
        };
        drop(r.tx);
        let outcome = r
            .thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        let [stream] = &input.model.streams[..] else {
            return None;
        };
        let held = stream.key == Some(r.key)
            // Nothing set aside: `finish` only removes requests.
            && stream.requests.len() == r.sent
            // Every handle kept, first seen in rising order: the numbers did not change.
            && stream.cuda_streams == r.handles
            && stream.recorded_segments.is_empty()
            && stream.device_total == r.device_total
            && input.capacities[0].0 == r.capacity
            && input.recorded_policy.is_none();
        held.then_some(RunResult {
            stream: 0,
            policy: 0,
            outcome,
        })
    }
}

impl Running {
    fn feed(&mut self, g: &Growing) {
        if g.handles.len() != self.handles.len() {
            self.handles = g.handles.to_vec();
        }
        if g.requests.len() > self.sent {
            // A send fails only once the replay has stopped (out of memory): it needs no more.
            let _ = self.tx.send(g.requests[self.sent..].to_vec());
            self.sent = g.requests.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Loader;
    use crate::policy::{REGISTRY, parse_specs};
    use crate::replay::{prepare, replay_all, run};
    use vramtrace_format::{Api, Event, Metadata};

    /// A call of process `pid` on device 0, at the time of its address.
    fn ev(api: Api, pid: u32, address: u64, size: u64, stream: u64) -> Event {
        let mut e = Event::new(api);
        (e.pid, e.device, e.address, e.size) = (pid, 0, address, size);
        (e.stream, e.time_ns) = (stream, address);
        e
    }

    /// Allocations and frees through the stream-ordered pool on `streams` in turn, some of
    /// them ordered by an event recorded and waited for.
    fn pool_events(streams: &[u64]) -> Vec<Event> {
        let mut events = Vec::new();
        for i in 0..64u64 {
            let stream = streams[i as usize % streams.len()];
            let address = 0x1000 * (i + 1);
            events.push(ev(
                Api::CuMemAllocAsync,
                1,
                address,
                4096 << (i % 5),
                stream,
            ));
            if i % 3 == 0 {
                events.push(ev(Api::CuEventRecord, 1, 0, 0, stream));
            }
            if i % 2 == 1 {
                events.push(ev(Api::CuMemFreeAsync, 1, address - 0x1000, 0, stream));
            }
        }
        events
    }

    /// `spec` replayed beside the load of `events`, fed every `block` events, and the input
    /// the finished load prepares.
    fn beside(spec: &str, events: &[Event], block: usize) -> (Option<RunResult>, ReplayInput) {
        let spec = &parse_specs(spec).unwrap()[0];
        let mut b = Beside::new(spec, &[], Limits::default()).expect("an online policy");
        let mut loader = Loader::requests_only();
        for chunk in events.chunks(block) {
            chunk.iter().for_each(|e| loader.push(e));
            b.feed(loader.growing());
        }
        let (model, _) = loader.finish(&Metadata::default());
        let input = prepare(model, &Metadata::default(), &[], Limits::default()).unwrap();
        (b.finish(&input), input)
    }

    #[test]
    fn a_stream_kept_whole_in_rising_handles_gives_the_replay_after_the_load() {
        for block in [1, 7, 1000] {
            let (run, input) = beside("pytorch", &pool_events(&[3, 7]), block);
            let after = replay_all(
                &input.model.streams,
                &parse_specs("pytorch").unwrap(),
                &[u64::MAX],
            )
            .unwrap();
            assert_eq!(run, Some(after[0].clone()), "fed every {block} events");
        }
    }

    #[test]
    fn a_guess_that_fails_gives_no_result() {
        // The handles come in falling order: the finished stream numbers them again.
        assert_eq!(beside("pytorch", &pool_events(&[7, 3]), 5).0, None);
        // A plain cuMemAlloc beside the pool's requests is set aside.
        let mut events = pool_events(&[3]);
        events.insert(9, ev(Api::CuMemAlloc_v2, 1, 0x9_0000, 1 << 20, 0));
        assert_eq!(beside("pytorch", &events, 5).0, None);
        // A second process: two streams to replay.
        let mut events = pool_events(&[3]);
        events.push(ev(Api::CuMemAllocAsync, 2, 0x9_0000, 1 << 20, 3));
        assert_eq!(beside("pytorch", &events, 5).0, None);
    }

    #[test]
    fn the_policies_that_start_beside_the_load_build_from_the_device_memory_alone() {
        let events = pool_events(&[3, 7]);
        let model = crate::model::Model::from_events(events, &Metadata::default());
        let stream = &model.streams[0];
        let bare = RequestStream {
            key: stream.key,
            device_total: stream.device_total,
            ..RequestStream::from_requests(Vec::new())
        };
        for p in REGISTRY {
            let spec = &parse_specs(p.name).unwrap()[0];
            let capacity = 1 << 24;
            let started = Beside::new(spec, &[], Limits::default()).is_some();
            if started {
                let requests = stream.requests.iter().copied();
                let beside = run_requests(&bare, requests, spec, capacity, AddressOrder::Rising);
                assert_eq!(beside, run(stream, spec, capacity), "{}", p.name);
            }
            assert_eq!(started, !READ_THE_STREAM.contains(&p.name), "{}", p.name);
        }
    }
}
