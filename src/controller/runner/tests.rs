//! Runner behaviour on paused time: a scripted reconciler records when each
//! key ran and whether two runs of one key ever overlapped.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

const S: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Ok(Requeue),
    Fail,
    Panic,
}

type Behaviour = dyn Fn(&str, usize) -> Outcome + Send + Sync;

/// What a scripted reconcile that fails returns.
#[derive(Debug, thiserror::Error)]
#[error("{key} failed")]
struct Failed {
    key: String,
}

struct Scripted {
    start: Instant,
    hold: Duration,
    behaviour: Box<Behaviour>,
    calls: Mutex<Vec<(String, Duration)>>,
    in_flight: Mutex<HashSet<String>>,
    current: AtomicUsize,
    max_seen: AtomicUsize,
    overlap: AtomicBool,
    completed: AtomicUsize,
}

impl Scripted {
    fn new(
        hold: Duration,
        f: impl Fn(&str, usize) -> Outcome + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Scripted {
            start: Instant::now(),
            hold,
            behaviour: Box::new(f),
            calls: Mutex::default(),
            in_flight: Mutex::default(),
            current: AtomicUsize::new(0),
            max_seen: AtomicUsize::new(0),
            overlap: AtomicBool::new(false),
            completed: AtomicUsize::new(0),
        })
    }

    /// Seconds (since start) at which `key` ran.
    fn times(&self, key: &str) -> Vec<u64> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| t.as_secs())
            .collect()
    }

    fn count_by_key(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for (k, _) in self.calls.lock().unwrap().iter() {
            *m.entry(k.clone()).or_default() += 1;
        }
        m
    }
}

impl Reconciler for Scripted {
    type Key = String;
    type Error = Failed;
    fn name(&self) -> &'static str {
        "test"
    }
    async fn reconcile(&self, key: &String) -> Result<Requeue, Failed> {
        let nth = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((key.clone(), self.start.elapsed()));
            calls.iter().filter(|(k, _)| k == key).count() - 1
        };
        if !self.in_flight.lock().unwrap().insert(key.clone()) {
            self.overlap.store(true, Ordering::SeqCst);
        }
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_seen.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.hold).await;
        self.current.fetch_sub(1, Ordering::SeqCst);
        self.in_flight.lock().unwrap().remove(key);
        self.completed.fetch_add(1, Ordering::SeqCst);
        match (self.behaviour)(key, nth) {
            Outcome::Ok(r) => Ok(r),
            Outcome::Fail => Err(Failed { key: key.clone() }),
            Outcome::Panic => panic!("{key} panicked"),
        }
    }
}

fn config(concurrency: usize) -> RunnerConfig {
    RunnerConfig {
        concurrency,
        resync: 60 * S,
        backoff: Backoff {
            base: S,
            cap: 4 * S,
        },
        shutdown_grace: 10 * S,
    }
}

struct Running {
    handle: QueueHandle<String>,
    cancel: CancellationToken,
    join: tokio::task::JoinHandle<()>,
    metrics: RunnerMetrics,
}

fn start(r: Arc<Scripted>, cfg: RunnerConfig) -> Running {
    let metrics = RunnerMetrics::default();
    let runner = Runner::new(r, cfg).with_metrics(metrics.clone());
    let handle = runner.handle();
    let cancel = CancellationToken::new();
    let join = tokio::spawn(runner.run(cancel.clone()));
    Running {
        handle,
        cancel,
        join,
        metrics,
    }
}

impl Running {
    async fn stop(self) {
        self.cancel.cancel();
        self.join.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_asks_for_one_key_is_one_reconcile() {
    let r = Scripted::new(S, |_, _| Outcome::Ok(Requeue::Forget));
    let run = start(r.clone(), config(4));
    for _ in 0..5 {
        run.handle.enqueue("a".to_string());
    }
    tokio::time::sleep(10 * S).await;
    assert_eq!(r.times("a"), [0]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn asks_while_running_give_one_more_run_never_an_overlap() {
    let r = Scripted::new(5 * S, |_, _| Outcome::Ok(Requeue::Forget));
    let run = start(r.clone(), config(4));
    run.handle.enqueue("a".to_string());
    tokio::time::sleep(S).await;
    for _ in 0..3 {
        run.handle.enqueue("a".to_string());
    }
    tokio::time::sleep(30 * S).await;
    assert_eq!(r.times("a"), [0, 5], "rerun right after the first run ends");
    assert!(!r.overlap.load(Ordering::SeqCst));
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn concurrency_is_bounded_and_every_key_runs() {
    let r = Scripted::new(S, |_, _| Outcome::Ok(Requeue::Forget));
    let run = start(r.clone(), config(3));
    for i in 0..10 {
        run.handle.enqueue(format!("k{i}"));
    }
    tokio::time::sleep(20 * S).await;
    assert_eq!(r.max_seen.load(Ordering::SeqCst), 3);
    let counts = r.count_by_key();
    assert_eq!(counts.len(), 10);
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    // Waves of three, one second apart.
    let mut starts: Vec<u64> = r
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, t)| t.as_secs())
        .collect();
    starts.sort();
    assert_eq!(starts, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_exponentially_per_key_with_a_cap() {
    let r = Scripted::new(Duration::ZERO, |key, nth| match key {
        "a" if nth < 6 => Outcome::Fail,
        _ => Outcome::Ok(Requeue::Forget),
    });
    let run = start(r.clone(), config(4));
    run.handle.enqueue("a".to_string());
    run.handle.enqueue("b".to_string());
    tokio::time::sleep(60 * S).await;
    // Gaps 1, 2, 4, then capped at 4; the seventh run succeeds and stops.
    assert_eq!(r.times("a"), [0, 1, 3, 7, 11, 15, 19]);
    assert_eq!(r.times("b"), [0], "b is not held back by a's failures");
    assert_eq!(run.metrics.count("test", "error"), 6);
    assert_eq!(run.metrics.count("test", "ok"), 2);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_ask_cuts_a_backoff_short() {
    let r = Scripted::new(Duration::ZERO, |_, nth| {
        if nth < 3 {
            Outcome::Fail
        } else {
            Outcome::Ok(Requeue::Forget)
        }
    });
    let run = start(r.clone(), config(4));
    run.handle.enqueue("a".to_string());
    tokio::time::sleep(S + S / 2).await; // failed at 0 and 1; next due at 3
    run.handle.enqueue("a".to_string()); // something changed: look now
    tokio::time::sleep(30 * S).await;
    let ms: Vec<u128> = {
        let calls = r.calls.lock().unwrap();
        calls.iter().map(|(_, t)| t.as_millis()).collect()
    };
    assert_eq!(ms, [0, 1000, 1500, 5500]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn success_requeues_periodically_or_when_asked() {
    let r = Scripted::new(Duration::ZERO, |key, _| match key {
        "p" => Outcome::Ok(Requeue::Periodic),
        _ => Outcome::Ok(Requeue::After(25 * S)),
    });
    let run = start(r.clone(), config(4));
    run.handle.enqueue("p".to_string());
    run.handle.enqueue("q".to_string());
    tokio::time::sleep(130 * S).await;
    assert_eq!(r.times("p"), [0, 60, 120]);
    assert_eq!(r.times("q"), [0, 25, 50, 75, 100, 125]);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_reconcile_is_counted_and_retried() {
    let r = Scripted::new(Duration::ZERO, |_, nth| {
        if nth == 0 {
            Outcome::Panic
        } else {
            Outcome::Ok(Requeue::Forget)
        }
    });
    let run = start(r.clone(), config(1));
    run.handle.enqueue("a".to_string());
    tokio::time::sleep(10 * S).await;
    assert_eq!(r.times("a"), [0, 1]);
    assert_eq!(run.metrics.count("test", "panic"), 1);
    assert_eq!(run.metrics.count("test", "ok"), 1);
    run.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cancellation_lets_in_flight_work_finish_within_the_grace() {
    let r = Scripted::new(3 * S, |_, _| Outcome::Ok(Requeue::Periodic));
    let run = start(r.clone(), config(4));
    run.handle.enqueue("a".to_string());
    tokio::time::sleep(S).await;
    let t = Instant::now();
    run.stop().await;
    assert_eq!(r.completed.load(Ordering::SeqCst), 1);
    assert_eq!(t.elapsed(), 2 * S, "returned when the reconcile ended");
}

#[tokio::test(start_paused = true)]
async fn cancellation_aborts_work_past_the_grace() {
    let r = Scripted::new(100 * S, |_, _| Outcome::Ok(Requeue::Periodic));
    let run = start(r.clone(), config(4));
    run.handle.enqueue("a".to_string());
    tokio::time::sleep(S).await;
    let t = Instant::now();
    run.stop().await;
    assert_eq!(r.completed.load(Ordering::SeqCst), 0);
    assert_eq!(t.elapsed(), 10 * S);
}

#[tokio::test(start_paused = true)]
async fn asks_after_the_runner_is_gone_are_dropped() {
    let r = Scripted::new(Duration::ZERO, |_, _| Outcome::Ok(Requeue::Forget));
    let run = start(r.clone(), config(1));
    let handle = run.handle.clone();
    run.stop().await;
    handle.enqueue("late".to_string());
    assert!(r.times("late").is_empty());
}

#[test]
fn metrics_register_under_the_metalherd_prefix() {
    let mut reg = Registry::with_prefix("metalherd");
    let m = RunnerMetrics::default();
    m.register(&mut reg);
    m.reconciles
        .get_or_create(&ResultLabels {
            controller: "machine",
            result: "ok",
        })
        .inc();
    m.queued
        .get_or_create(&ControllerLabels {
            controller: "machine",
        })
        .set(3);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
    assert!(
        out.contains(r#"metalherd_reconciles_total{controller="machine",result="ok"} 1"#),
        "{out}"
    );
    assert!(
        out.contains(r#"metalherd_reconcile_queue_depth{controller="machine"} 3"#),
        "{out}"
    );
}
