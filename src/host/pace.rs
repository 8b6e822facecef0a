//! Paced flushes of a device thread's queue: flush only a thread that has run what was flushed
//! to it before.
//!
//! CubeCL's device threads (burn-fusion's, and CubeCL's own compute thread) take their queue
//! only once 32 tasks fill it. `DeviceHandle::flush_queue` pads it with no-op tasks so the
//! thread takes it now; but until the thread has taken it, every new task waits, spinning, for
//! the thread to finish the batch it is running. Flushing a busy thread after each op or block
//! makes the producer wait on it: on the H100, the caller's recording of a small forward grew
//! by 2-8 µs with a flush after every op, and a flush after every block slowed a small MLP's
//! training step by 15-58 % (decision record 0006).
//!
//! A [`Pace`] counts the flushes asked of one device thread and, through a marker task queued
//! behind each, the flushes the thread has run. [`Pace::flush_if_idle`] flushes only when the
//! two are equal: the thread is then spinning on an empty queue and takes the new tasks at
//! once. Otherwise the tasks stay queued and go with a later flush, a full queue, or the
//! caller's sync or read, as under Burn. Skipping a flush never changes what runs, only when.

use crate::stats::{Leaked, leaked};
use cubecl::device::{DeviceId, DeviceService, DeviceServiceStage};
use cubecl::device_handle::DeviceHandle;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The flush counts of one device thread (a device and a stage).
#[derive(Debug, Default)]
pub struct Pace {
    /// Flushes asked (each followed by a marker task).
    flushed: AtomicU64,
    /// The highest flush whose marker task the thread has run.
    taken: AtomicU64,
}

/// The pace of each device thread, by device and stage. Leaked, one per thread: marker tasks
/// borrow them without reference counts.
static PACES: Leaked<(DeviceId, DeviceServiceStage), Pace> = RwLock::new(Vec::new());

impl Pace {
    /// The pace of `device`'s thread of `stage`: burn-fusion's (`Upstream`) or CubeCL's
    /// compute thread (`Downstream`).
    pub fn of(device: DeviceId, stage: DeviceServiceStage) -> &'static Pace {
        leaked(&PACES, (device, stage))
    }

    /// Whether the thread has run every flush asked of it through this pace.
    pub fn idle(&self) -> bool {
        self.taken.load(Ordering::Acquire) >= self.flushed.load(Ordering::Acquire)
    }

    /// Flushes `handle`'s queue (this pace's thread) behind a marker task, without waiting.
    pub fn flush<S: DeviceService + 'static>(&'static self, handle: &DeviceHandle<S>) {
        let flush = self.flushed.fetch_add(1, Ordering::AcqRel) + 1;
        handle.submit(move |_: &mut S| {
            self.taken.fetch_max(flush, Ordering::AcqRel);
        });
        handle.flush_queue();
    }

    /// [`flush`](Self::flush)es if the thread is [`idle`](Self::idle); returns whether it did.
    pub fn flush_if_idle<S: DeviceService + 'static>(
        &'static self,
        handle: &DeviceHandle<S>,
    ) -> bool {
        let idle = self.idle();
        if idle {
            self.flush(handle);
        }
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cubecl::device::ServerUtilitiesHandle;
    use std::sync::Arc;
    use std::sync::mpsc::{Receiver, channel};
    use std::time::Duration;

    struct Service;

    impl DeviceService for Service {
        fn init(_device: DeviceId) -> Self {
            Service
        }

        fn utilities(&self) -> ServerUtilitiesHandle {
            Arc::new(())
        }

        fn stage() -> DeviceServiceStage {
            DeviceServiceStage::Upstream
        }
    }

    /// A device of its own for each test (CubeCL keeps one thread per device id and stage).
    fn device(index: u16) -> DeviceId {
        DeviceId {
            type_id: 0xface,
            index_id: index,
        }
    }

    /// Blocks the thread until the returned sender sends; the receiver says it started.
    fn block(handle: &DeviceHandle<Service>) -> (std::sync::mpsc::Sender<()>, Receiver<()>) {
        let (release, wait) = channel::<()>();
        let (started, running) = channel::<()>();
        handle.submit(move |_: &mut Service| {
            started.send(()).unwrap();
            wait.recv().unwrap();
        });
        (release, running)
    }

    #[test]
    fn a_flushed_thread_is_idle_once_it_ran_the_flush() {
        let id = device(1);
        let (pace, handle) = (
            Pace::of(id, DeviceServiceStage::Upstream),
            DeviceHandle::<Service>::new(id),
        );
        assert!(
            std::ptr::eq(pace, Pace::of(id, DeviceServiceStage::Upstream)),
            "one pace a thread"
        );
        assert!(
            !std::ptr::eq(pace, Pace::of(id, DeviceServiceStage::Downstream)),
            "one pace a stage"
        );
        assert!(pace.idle(), "nothing flushed yet");
        let (release, running) = block(&handle);
        assert!(pace.flush_if_idle(&handle));
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        // The thread runs the blocking task: the flush's marker has not run.
        assert!(!pace.idle());
        release.send(()).unwrap();
        handle.submit_blocking(|_| ()).unwrap();
        assert!(pace.idle(), "the marker ran behind the blocking task");
    }

    #[test]
    fn a_busy_thread_is_not_flushed_and_its_tasks_still_run() {
        let id = device(2);
        let (pace, handle) = (
            Pace::of(id, DeviceServiceStage::Upstream),
            DeviceHandle::<Service>::new(id),
        );
        let (release, running) = block(&handle);
        pace.flush(&handle);
        running.recv_timeout(Duration::from_secs(10)).unwrap();
        let (done, ran) = channel();
        handle.submit(move |_: &mut Service| done.send(()).unwrap());
        assert!(!pace.flush_if_idle(&handle), "flushed a busy thread");
        release.send(()).unwrap();
        // Unflushed, the task waits for a later flush; `submit_blocking` flushes.
        handle.submit_blocking(|_| ()).unwrap();
        ran.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(pace.idle());
    }
}
