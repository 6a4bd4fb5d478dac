//! A progress line on stderr every second while a run lasts.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct Progress {
    pub arrived: Arc<AtomicUsize>,
    pub done: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts the printer (when `enabled`); `in_flight` is read each second.
    pub fn start(
        enabled: bool,
        label: String,
        duration_s: f64,
        in_flight: Arc<AtomicUsize>,
    ) -> Progress {
        let arrived = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = enabled.then(|| {
            let (arrived, done, stop) = (arrived.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let mut next = Duration::from_secs(1);
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                    if t0.elapsed() >= next {
                        next += Duration::from_secs(1);
                        eprintln!(
                            "[{label}] {:>5.1}/{duration_s} s  sent {}  done {}  in flight {}",
                            t0.elapsed().as_secs_f64(),
                            arrived.load(Ordering::Relaxed),
                            done.load(Ordering::Relaxed),
                            in_flight.load(Ordering::Relaxed)
                        );
                    }
                }
            })
        });
        Progress {
            arrived,
            done,
            stop,
            thread,
        }
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
