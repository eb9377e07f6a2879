//! Real-process tests of the worker supervisor. Children are `/bin/sh -c` scripts or this
//! test binary re-executed; every test runs under a watchdog that aborts the binary rather
//! than letting CI hang.
#![cfg(not(loom))]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pycollect_core::supervisor::{
    ChildState, Ending, Event, ExitReason, ExitStatus, Restart, RestartPolicy, Supervisor,
    SupervisorConfig, SupervisorError, WorkerLaunch, DEFAULT_LIFELINE_FD, EVENT_CAPACITY,
};
use rustix::process::{kill_process, Pid, Signal};

// ---------------------------------------------------------------------------------------
// helpers

/// Aborts the whole test binary if the guard is not dropped within `secs`.
struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

fn watchdog(name: &'static str, secs: u64) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
            // Straight to fd 2: `eprintln!` output is captured by the test harness and would be
            // lost with the abort.
            let _ = writeln!(
                std::io::stderr(),
                "watchdog: test {name} ran longer than {secs} s; aborting"
            );
            std::process::abort();
        }
    });
    Watchdog(tx)
}

/// Fast settings for tests: short timeouts, tiny backoff.
fn config(workers: usize, restart: Restart) -> SupervisorConfig {
    SupervisorConfig {
        policy: RestartPolicy {
            restart,
            max_restarts: 5,
            restart_window: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
        },
        check_interval: Duration::from_millis(20),
        grace: Duration::from_millis(200),
        term_timeout: Duration::from_millis(500),
        kill_timeout: Duration::from_secs(2),
        workers,
        startup_timeout: Duration::from_secs(120),
        heartbeat_timeout: Duration::from_secs(30),
        lifeline_fd: DEFAULT_LIFELINE_FD,
        event_capacity: EVENT_CAPACITY,
    }
}

fn sh(script: &str) -> WorkerLaunch {
    WorkerLaunch::new("/bin/sh").args(["-c", script])
}

/// Starts `workers` workers that all run `script`.
fn start_sh(cfg: SupervisorConfig, script: &'static str) -> Supervisor {
    Supervisor::builder(cfg)
        .start(move |_w, _g| Ok(sh(script)))
        .expect("start")
}

/// Takes events until one matches `pred`; returns it and everything seen before it.
fn expect_event(
    sup: &Supervisor,
    timeout: Duration,
    mut pred: impl FnMut(&Event) -> bool,
) -> (Event, Vec<Event>) {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        match sup.next_event(deadline.saturating_duration_since(Instant::now())) {
            Some(e) if pred(&e) => return (e, seen),
            Some(e) => seen.push(e),
            None => panic!("no matching event within {timeout:?}; saw {seen:?}"),
        }
    }
}

fn started_pid(sup: &Supervisor, worker: usize, generation: u64) -> u32 {
    match expect_event(sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Started { worker: w, generation: g, .. } if *w == worker && *g == generation)
    })
    .0
    {
        Event::Started { pid, .. } => pid,
        _ => unreachable!(),
    }
}

/// Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ...
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Running means present and neither a zombie nor dead. Orphaned grandchildren may stay
/// zombies if the container's PID 1 does not reap; that is not ours to fix.
fn running(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|f| f[0] != "Z" && f[0] != "X")
}

/// Running processes whose process group is `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            proc_stat(pid).is_some_and(|f| f[0] != "Z" && f[0] != "X" && f[2] == pgid.to_string())
        })
        .collect()
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

fn temp_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pycollect-sup-{}-{tag}", std::process::id()))
}

fn sigkill(pid: u32) {
    let pid = Pid::from_raw(pid as i32).expect("non-zero pid");
    kill_process(pid, Signal::KILL).expect("kill");
}

// ---------------------------------------------------------------------------------------
// exits and restart policy

#[test]
fn exit_code_recorded_and_transient_stops_after_clean_exit() {
    let _w = watchdog("exit_code_recorded", 20);
    let sup = Supervisor::builder(config(2, Restart::Transient))
        .start(|w, _g| Ok(sh(if w == 0 { "exit 0" } else { "exit 7" })))
        .unwrap();
    let (e, _) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Exited { worker: 1, .. })
    });
    match e {
        Event::Exited {
            generation,
            status,
            reason,
            ..
        } => {
            assert_eq!(generation, 1);
            assert_eq!(status, ExitStatus::Code(7));
            assert_eq!(reason, ExitReason::Exit);
        }
        _ => unreachable!(),
    }
    // Worker 1 (abnormal) restarts as generation 2; worker 0 (clean) must stay stopped.
    let (_, seen) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(
            e,
            Event::Started {
                worker: 1,
                generation: 2,
                ..
            }
        )
    });
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, Event::Restarting { worker: 0, .. })),
        "{seen:?}"
    );
    assert!(wait_until(Duration::from_secs(5), || {
        sup.stats()[0].state == ChildState::Stopped
    }));
    let s0 = &sup.stats()[0];
    assert_eq!(s0.generation, 1);
    assert_eq!(s0.restarts, 0);
    assert_eq!(s0.last_exit.as_ref().unwrap().status, ExitStatus::Code(0));
    sup.shutdown(Duration::ZERO).unwrap();
}

#[test]
fn clean_exit_that_is_not_restarted_is_reported_as_stopped() {
    let _w = watchdog("clean_exit_stopped", 20);
    for restart in [Restart::Transient, Restart::Never] {
        let sup = start_sh(config(1, restart), "exit 0");
        let (e, seen) = expect_event(&sup, Duration::from_secs(5), |e| {
            matches!(e, Event::Stopped { .. })
        });
        assert_eq!(
            e,
            Event::Stopped {
                worker: 0,
                generation: 1
            },
            "{restart:?}"
        );
        // Published right after the exit it follows, like Restarting and GaveUp.
        assert!(
            matches!(
                seen.last(),
                Some(Event::Exited {
                    worker: 0,
                    generation: 1,
                    status: ExitStatus::Code(0),
                    reason: ExitReason::Exit,
                    ..
                })
            ),
            "{restart:?}: {seen:?}"
        );
        // The stats already say so when the event arrives.
        assert_eq!(sup.stats()[0].state, ChildState::Stopped, "{restart:?}");
        let report = sup.shutdown(Duration::ZERO).unwrap();
        assert_eq!(report.workers[0].ending, Ending::NotRunning, "{restart:?}");
        let rest = sup.drain_events();
        assert!(
            !seen.iter().chain(&rest).any(|e| matches!(
                e,
                Event::Restarting { .. }
                    | Event::GaveUp { .. }
                    | Event::Started { generation: 2, .. }
            )),
            "{restart:?}: {seen:?} {rest:?}"
        );
    }
}

#[test]
fn on_exit_runs_after_the_reap_and_before_the_exit_is_reported() {
    let _w = watchdog("on_exit_order", 20);
    let (tx, rx) = mpsc::channel::<(usize, u64, bool)>();
    let sup = Supervisor::builder(config(2, Restart::Permanent))
        .on_exit(move |worker, generation| {
            // Reaped: the pid is no longer in /proc (the reap took it out, zombie included).
            let pid: u32 = fs::read_to_string(temp_path(&format!("onexit-{worker}-{generation}")))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            let _ = tx.send((worker, generation, pid != 0 && proc_stat(pid).is_none()));
        })
        .start(|w, g| {
            let path = temp_path(&format!("onexit-{w}-{g}"));
            Ok(sh(&format!(
                "echo $$ > '{}'; exec sleep 100",
                path.display()
            )))
        })
        .unwrap();
    let pid = started_pid(&sup, 0, 1);
    started_pid(&sup, 1, 1);
    assert!(wait_until(Duration::from_secs(5), || {
        fs::read_to_string(temp_path("onexit-0-1")).is_ok_and(|s| s.trim() == pid.to_string())
    }));
    sigkill(pid);
    expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Exited { worker: 0, .. })
    });
    // By the time the exit is reported, the callback has run, once, for the reaped generation.
    assert_eq!(rx.try_recv(), Ok((0, 1, true)));
    assert!(rx.try_recv().is_err());
    // A generation reaped during shutdown gets the callback too.
    started_pid(&sup, 0, 2);
    sup.shutdown(Duration::ZERO).unwrap();
    let mut rest: Vec<(usize, u64)> = rx.try_iter().map(|(w, g, _)| (w, g)).collect();
    rest.sort_unstable();
    assert_eq!(rest, [(0, 2), (1, 1)]);
    for (w, g) in [(0, 1), (0, 2), (1, 1)] {
        let _ = fs::remove_file(temp_path(&format!("onexit-{w}-{g}")));
    }
}

#[test]
fn never_gives_up_at_once() {
    let _w = watchdog("never_gives_up_at_once", 20);
    let sup = start_sh(config(1, Restart::Never), "exit 3");
    let (e, seen) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::GaveUp { .. })
    });
    assert_eq!(
        e,
        Event::GaveUp {
            worker: 0,
            generation: 1,
            restarts: 0
        }
    );
    assert!(seen.iter().any(|e| matches!(
        e,
        Event::Exited {
            status: ExitStatus::Code(3),
            ..
        }
    )));
    assert!(!seen.iter().any(|e| matches!(e, Event::Restarting { .. })));
    assert_eq!(sup.stats()[0].state, ChildState::GaveUp);
    let report = sup.shutdown(Duration::ZERO).unwrap();
    assert_eq!(report.workers[0].ending, Ending::NotRunning);
}

#[test]
fn sigkill_restarts_with_next_generation() {
    let _w = watchdog("sigkill_restarts", 20);
    let sup = start_sh(config(1, Restart::Permanent), "exec sleep 100");
    let pid1 = started_pid(&sup, 0, 1);
    assert_eq!(sup.stats()[0].pid, Some(pid1));
    sigkill(pid1);
    let (e, _) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Exited { .. })
    });
    assert_eq!(
        e,
        Event::Exited {
            worker: 0,
            generation: 1,
            pid: pid1,
            status: ExitStatus::Signal(9),
            reason: ExitReason::Signal
        }
    );
    let (e, _) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Restarting { .. })
    });
    assert!(matches!(
        e,
        Event::Restarting {
            worker: 0,
            next_generation: 2,
            ..
        }
    ));
    let pid2 = started_pid(&sup, 0, 2);
    assert_ne!(pid1, pid2);
    // The killed generation was reaped: no zombie left behind.
    assert!(proc_stat(pid1).is_none(), "pid {pid1} still in /proc");
    let s = &sup.stats()[0];
    assert_eq!((s.generation, s.restarts, s.pid), (2, 1, Some(pid2)));
    let report = sup.shutdown(Duration::ZERO).unwrap();
    assert_eq!(report.workers[0].generation, 2);
    assert!(matches!(
        report.workers[0].ending,
        Ending::Terminated(ExitStatus::Signal(15))
    ));
    assert!(proc_stat(pid2).is_none(), "pid {pid2} still in /proc");
}

#[test]
fn restart_intensity_limit_gives_up() {
    let _w = watchdog("restart_intensity", 20);
    let mut cfg = config(1, Restart::Permanent);
    cfg.policy.max_restarts = 2;
    let sup = start_sh(cfg, "exit 1");
    let (e, seen) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::GaveUp { .. })
    });
    assert_eq!(
        e,
        Event::GaveUp {
            worker: 0,
            generation: 3,
            restarts: 2
        }
    );
    let starts = seen
        .iter()
        .filter(|e| matches!(e, Event::Started { .. }))
        .count();
    assert_eq!(starts, 3, "{seen:?}");
    // Backoff doubles: 10 ms, then 20 ms.
    let afters: Vec<Duration> = seen
        .iter()
        .filter_map(|e| match e {
            Event::Restarting { after, .. } => Some(*after),
            _ => None,
        })
        .collect();
    assert_eq!(
        afters,
        [Duration::from_millis(10), Duration::from_millis(20)]
    );
    assert_eq!(sup.stats()[0].state, ChildState::GaveUp);
}

#[test]
fn spawn_failure_on_restart_counts_toward_give_up() {
    let _w = watchdog("spawn_failure_on_restart", 20);
    let mut cfg = config(1, Restart::Permanent);
    cfg.policy.max_restarts = 2;
    let sup = Supervisor::builder(cfg)
        .start(|_w, g| {
            if g == 1 {
                Ok(sh("exit 1"))
            } else {
                Err(std::io::Error::other("no more"))
            }
        })
        .unwrap();
    let (e, seen) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::GaveUp { .. })
    });
    assert!(matches!(e, Event::GaveUp { generation: 3, .. }), "{e:?}");
    let failures = seen
        .iter()
        .filter(|e| matches!(e, Event::SpawnFailed { error, .. } if error.contains("no more")))
        .count();
    assert_eq!(failures, 2, "{seen:?}");
}

// ---------------------------------------------------------------------------------------
// hangs

#[test]
fn stalled_heartbeat_is_a_hang() {
    let _w = watchdog("stalled_heartbeat", 20);
    let mut cfg = config(1, Restart::Permanent);
    cfg.heartbeat_timeout = Duration::from_millis(300);
    cfg.startup_timeout = Duration::from_secs(5);
    let t0 = Instant::now();
    let sup = Supervisor::builder(cfg)
        // Generation 1 beats for 200 ms and then stalls; later generations keep beating.
        .heartbeat(move |_w, g| {
            let ms = t0.elapsed().as_millis() as u64;
            Some(if g == 1 { ms.min(200) } else { ms })
        })
        .start(|_w, _g| Ok(sh("exec sleep 100")))
        .unwrap();
    let pid1 = started_pid(&sup, 0, 1);
    let (e, _) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Exited { .. })
    });
    let detected = t0.elapsed();
    assert_eq!(
        e,
        Event::Exited {
            worker: 0,
            generation: 1,
            pid: pid1,
            status: ExitStatus::Signal(9),
            reason: ExitReason::Hung
        }
    );
    assert!(
        detected >= Duration::from_millis(500) && detected < Duration::from_secs(3),
        "hang detected after {detected:?}"
    );
    started_pid(&sup, 0, 2);
    // The healthy generation is left alone.
    thread::sleep(Duration::from_millis(600));
    let extra = sup.drain_events();
    assert!(
        !extra.iter().any(|e| matches!(e, Event::Exited { .. })),
        "{extra:?}"
    );
    assert_eq!(
        sup.stats()[0].last_exit.as_ref().unwrap().reason,
        ExitReason::Hung
    );
}

#[test]
fn missing_first_beat_hits_startup_timeout() {
    let _w = watchdog("startup_timeout", 20);
    let mut cfg = config(1, Restart::Never);
    cfg.startup_timeout = Duration::from_millis(200);
    // A stale value from an earlier generation must not count as a first beat.
    let sup = Supervisor::builder(cfg)
        .heartbeat(|_w, _g| Some(12345))
        .start(|_w, _g| Ok(sh("exec sleep 100")))
        .unwrap();
    let (_, seen) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::GaveUp { .. })
    });
    assert!(
        seen.iter().any(|e| matches!(
            e,
            Event::Exited {
                reason: ExitReason::Hung,
                ..
            }
        )),
        "{seen:?}"
    );
}

// ---------------------------------------------------------------------------------------
// teardown

#[test]
fn teardown_kills_term_ignoring_child_and_its_group() {
    let _w = watchdog("teardown_kills", 20);
    let sup = start_sh(
        config(1, Restart::Permanent),
        "trap '' TERM; sleep 100 & sleep 100 & wait; wait; sleep 100",
    );
    let pid = started_pid(&sup, 0, 1);
    // The worker plus its two grandchildren, all in the worker's process group.
    assert!(
        wait_until(Duration::from_secs(5), || group_members(pid).len() == 3),
        "group {pid}: {:?}",
        group_members(pid)
    );
    let grandchildren: Vec<u32> = group_members(pid)
        .into_iter()
        .filter(|&p| p != pid)
        .collect();

    let t0 = Instant::now();
    let report = sup.shutdown(Duration::from_millis(100)).unwrap();
    let took = t0.elapsed();
    assert_eq!(report.workers[0].pid, Some(pid));
    assert_eq!(
        report.workers[0].ending,
        Ending::Killed(ExitStatus::Signal(9)),
        "{report:?}"
    );
    // grace 100 ms + term_timeout 500 ms + a little.
    assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
    assert!(proc_stat(pid).is_none(), "worker {pid} not reaped");
    assert!(
        wait_until(Duration::from_secs(2), || grandchildren
            .iter()
            .all(|&g| !running(g))),
        "grandchildren survived: {grandchildren:?}"
    );
    assert!(group_members(pid).is_empty());
    // Idempotent: same report again, and drop does nothing more.
    assert_eq!(sup.shutdown(Duration::ZERO).unwrap(), report);
    assert_eq!(sup.stats()[0].state, ChildState::ShutDown);
    // The event queue is closed: waiting returns at once instead of after the timeout.
    sup.drain_events();
    let t0 = Instant::now();
    assert_eq!(sup.next_event(Duration::from_secs(5)), None);
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn teardown_reports_exited_and_terminated() {
    let _w = watchdog("teardown_reports", 20);
    let sup = Supervisor::builder(config(2, Restart::Permanent))
        .start(|w, _g| {
            Ok(sh(if w == 0 {
                // Leaves on lifeline EOF, i.e. within the grace period.
                "read x <&\"$PYCOLLECT_LIFELINE_FD\"; exit 0"
            } else {
                "exec sleep 100"
            }))
        })
        .unwrap();
    started_pid(&sup, 0, 1);
    started_pid(&sup, 1, 1);
    let report = sup.shutdown(Duration::from_millis(500)).unwrap();
    assert_eq!(
        report.workers[0].ending,
        Ending::Exited(ExitStatus::Code(0))
    );
    assert_eq!(
        report.workers[1].ending,
        Ending::Terminated(ExitStatus::Signal(15))
    );
}

#[test]
fn on_shutdown_runs_first() {
    let _w = watchdog("on_shutdown_runs_first", 20);
    let flag = temp_path("flag");
    let _ = fs::remove_file(&flag);
    let flag2 = flag.clone();
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done; exit 5",
        flag.display()
    );
    let sup = Supervisor::builder(config(1, Restart::Permanent))
        .on_shutdown(move || {
            fs::write(&flag2, b"stop").unwrap();
        })
        .start(move |_w, _g| Ok(sh(&script)))
        .unwrap();
    started_pid(&sup, 0, 1);
    let report = sup.shutdown(Duration::from_secs(5)).unwrap();
    assert_eq!(
        report.workers[0].ending,
        Ending::Exited(ExitStatus::Code(5))
    );
    let _ = fs::remove_file(&flag);
}

// ---------------------------------------------------------------------------------------
// lifeline and fds

#[test]
fn lifeline_reads_eof_when_supervisor_is_dropped() {
    let _w = watchdog("lifeline_eof", 20);
    let out = temp_path("lifeline");
    let _ = fs::remove_file(&out);
    let script = format!(
        "read x <&\"$PYCOLLECT_LIFELINE_FD\"; echo eof > '{}'",
        out.display()
    );
    let mut cfg = config(1, Restart::Permanent);
    cfg.grace = Duration::from_secs(10);
    let sup = Supervisor::builder(cfg)
        .start(move |_w, _g| Ok(sh(&script)))
        .unwrap();
    let pid = started_pid(&sup, 0, 1);
    // While the supervisor lives, the lifeline stays open and the child keeps waiting.
    thread::sleep(Duration::from_millis(300));
    assert!(running(pid));
    assert!(!out.exists());
    let t0 = Instant::now();
    drop(sup);
    // Far less than the 10 s grace: the child left on EOF.
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "drop took {:?}",
        t0.elapsed()
    );
    assert_eq!(fs::read_to_string(&out).unwrap().trim(), "eof");
    assert!(proc_stat(pid).is_none());
    let _ = fs::remove_file(&out);
}

#[test]
fn passed_fds_arrive_at_requested_numbers() {
    let _w = watchdog("passed_fds", 20);
    let (r7, w7) = rustix::pipe::pipe().unwrap();
    let (r4, w4) = rustix::pipe::pipe().unwrap();
    let mut slots = Some((w7, w4));
    let sup = Supervisor::builder(config(1, Restart::Never))
        .start(move |_w, _g| {
            let (w7, w4) = slots.take().ok_or_else(|| std::io::Error::other("once"))?;
            Ok(sh("echo \"seven $PYCOLLECT_LIFELINE_FD $PYCOLLECT_SUPERVISOR_PID\" >&7; echo four >&4")
                .pass_fd(w7, 7)
                .pass_fd(w4, 4))
        })
        .unwrap();
    let read_all = |fd: OwnedFd| {
        let mut s = String::new();
        fs::File::from(fd).read_to_string(&mut s).unwrap();
        s
    };
    // EOF arrives only if no stray copy of the write end stayed open in the supervisor.
    assert_eq!(
        read_all(r7).trim(),
        format!("seven 3 {}", std::process::id())
    );
    assert_eq!(read_all(r4).trim(), "four");
    let (e, _) = expect_event(&sup, Duration::from_secs(5), |e| {
        matches!(e, Event::Exited { .. })
    });
    assert!(
        matches!(
            e,
            Event::Exited {
                status: ExitStatus::Code(0),
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn exec_failure_with_passed_fds_is_a_spawn_error() {
    // Alone in a process of its own (this binary re-run for this test only): the other tests'
    // threads open and close fds all the time, and one they free between the supervisor's
    // reservation of the low numbers and its spawn could take std's exec-error pipe to a
    // target number, which is the race this test must not see from outside.
    if std::env::var_os("PYCOLLECT_TEST_ALONE").is_none() {
        let name = "exec_failure_with_passed_fds_is_a_spawn_error";
        let status = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", name, "--test-threads=1"])
            .env("PYCOLLECT_TEST_ALONE", "1")
            .status()
            .expect("re-run the test binary");
        assert!(status.success(), "{name}, run alone, failed: {status}");
        return;
    }
    let _w = watchdog("exec_failure", 20);
    // Low fd numbers are likely free in a test process: exactly where std's internal
    // exec-error pipe would land if the supervisor did not keep them occupied.
    let res = Supervisor::builder(config(1, Restart::Never)).start(|_w, _g| {
        let null = |_| -> std::io::Result<OwnedFd> { Ok(fs::File::open("/dev/null")?.into()) };
        Ok(WorkerLaunch::new("/nonexistent/pycollect-worker")
            .pass_fd(null(())?, 4)
            .pass_fd(null(())?, 5))
    });
    match res {
        Err(SupervisorError::Spawn {
            worker: 0,
            generation: 1,
            program,
            source,
        }) => {
            assert_eq!(program, "/nonexistent/pycollect-worker");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[test]
fn start_failure_takes_down_started_workers() {
    let _w = watchdog("start_failure", 20);
    let pidfile = temp_path("startfail");
    let _ = fs::remove_file(&pidfile);
    let script = format!("echo $$ > '{}'; exec sleep 100", pidfile.display());
    let res = Supervisor::builder(config(2, Restart::Permanent)).start(move |w, _g| {
        if w == 0 {
            Ok(sh(&script))
        } else {
            Ok(WorkerLaunch::new("/nonexistent/prog").pass_fd(fs::File::open("/dev/null")?, 2))
        }
    });
    let err = res.unwrap_err();
    assert!(
        matches!(
            err,
            SupervisorError::InvalidFdNumber {
                worker: 1,
                fd: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("fd number 2"), "{err}");
    if let Some(pid) = fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        assert!(proc_stat(pid).is_none(), "worker 0 ({pid}) left behind");
    }
    let _ = fs::remove_file(&pidfile);
}

#[test]
fn on_shutdown_panic_is_reraised_after_teardown() {
    let _w = watchdog("on_shutdown_panic", 20);
    let sup = Supervisor::builder(config(1, Restart::Permanent))
        .on_shutdown(|| panic!("callback failed"))
        .start(|_w, _g| Ok(sh("exec sleep 100")))
        .unwrap();
    let pid = started_pid(&sup, 0, 1);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sup.shutdown(Duration::ZERO)
    }));
    assert!(res.is_err(), "the callback's panic was swallowed");
    // The workers were stopped anyway, and the report is kept.
    assert!(proc_stat(pid).is_none(), "worker {pid} left behind");
    let report = sup.shutdown(Duration::ZERO).unwrap();
    assert!(matches!(report.workers[0].ending, Ending::Terminated(_)));
}

#[test]
fn on_exit_panic_does_not_stop_supervision_and_is_reraised_at_shutdown() {
    let _w = watchdog("on_exit_panic", 20);
    let sup = Supervisor::builder(config(1, Restart::Permanent))
        .on_exit(|_w, _g| panic!("exit hook failed"))
        .start(|_w, _g| Ok(sh("exec sleep 100")))
        .unwrap();
    sigkill(started_pid(&sup, 0, 1));
    // Supervision went on: the exit was reported and the worker restarted.
    let pid = started_pid(&sup, 0, 2);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sup.shutdown(Duration::ZERO)
    }));
    assert!(res.is_err(), "the hook's panic was swallowed");
    assert!(proc_stat(pid).is_none(), "worker {pid} left behind");
    let report = sup.shutdown(Duration::ZERO).unwrap();
    assert!(matches!(report.workers[0].ending, Ending::Terminated(_)));
}

#[test]
fn handle_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Supervisor>();
}

#[test]
fn launcher_panic_is_a_launcher_error() {
    let _w = watchdog("launcher_panic", 20);
    let err = Supervisor::builder(config(1, Restart::Never))
        .start(|_w, _g| -> std::io::Result<WorkerLaunch> { panic!("boom") })
        .unwrap_err();
    assert!(
        matches!(err, SupervisorError::Launcher { worker: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("panicked"), "{err}");
}

#[test]
fn config_errors_name_the_value() {
    let mut cfg = config(0, Restart::Never);
    let err = Supervisor::builder(cfg.clone())
        .start(|_w, _g| Ok(sh("true")))
        .unwrap_err();
    assert!(err.to_string().contains("workers = 0"), "{err}");
    cfg.workers = 1;
    cfg.lifeline_fd = 1;
    let err = Supervisor::builder(cfg)
        .start(|_w, _g| Ok(sh("true")))
        .unwrap_err();
    assert!(err.to_string().contains("lifeline_fd = 1"), "{err}");
}

// ---------------------------------------------------------------------------------------
// parent death

const INTERMEDIATE_ENV: &str = "PYCOLLECT_SUP_TEST_INTERMEDIATE";

/// Body of the intermediate process: a supervisor with two workers, their pids on stdout,
/// then waiting to be SIGKILLed by the test (it gives up after 30 s so that a failed test
/// cannot leave it behind for long).
fn run_intermediate() {
    let sup = start_sh(config(2, Restart::Permanent), "exec sleep 100");
    let pids: Vec<u32> = (0..2).map(|w| started_pid(&sup, w, 1)).collect();
    // Leading newline: the harness has already printed "test ... " without one.
    println!("\nPIDS {} {}", pids[0], pids[1]);
    thread::sleep(Duration::from_secs(30));
}

/// Kills and reaps the intermediate even when an assertion fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn parent_death_kills_children() {
    if std::env::var_os(INTERMEDIATE_ENV).is_some() {
        run_intermediate();
        return;
    }
    let _w = watchdog("parent_death", 30);
    let mut inter = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "parent_death_kills_children",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(INTERMEDIATE_ENV, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = inter.0.stdout.take().unwrap();
    let pids: Vec<u32> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.split_once("PIDS ").map(|(_, r)| {
                r.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
        })
        .expect("intermediate printed no pids");
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&p| running(p)));
    // SIGKILL: no destructor, no teardown; only the kernel (PDEATHSIG) can help now.
    inter.0.kill().unwrap();
    inter.0.wait().unwrap();
    let t0 = Instant::now();
    assert!(
        wait_until(Duration::from_secs(2), || pids.iter().all(|&p| !running(p))),
        "children {pids:?} outlived their parent by 2 s"
    );
    eprintln!("children gone {:?} after the parent", t0.elapsed());
}
