//! Reading the driver's text report in tests.
#![allow(dead_code)]

/// The number on the report line `[OP], METRIC, n` (0 when there is none).
pub fn report_value(report: &str, op: &str, metric: &str) -> u64 {
    let prefix = format!("[{op}], {metric}, ");
    report
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

/// How many `op` operations returned OK.
pub fn ok_count(report: &str, op: &str) -> u64 {
    report_value(report, op, "Return=OK")
}

/// Runs `cmd` to its end, as `Command::output`, but fails the test (killing
/// the child) if it takes longer than `secs`: a driver waiting on a server
/// that stopped answering must fail a test, not hang it.
pub fn output_within(cmd: &mut std::process::Command, secs: u64) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = r.read_to_end(&mut b);
            b
        })
    };
    let out = pipe(Box::new(child.stdout.take().expect("piped")));
    let err = pipe(Box::new(child.stderr.take().expect("piped")));
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the program") {
            break s;
        }
        if t.elapsed().as_secs() >= secs {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Readers of a running driver's output: its stdout (the report) and its
/// stderr, each read to its end on a thread; a message on the receiver for
/// each status line (`-s`), which says operations are being done.
pub struct DriverOutput {
    /// A message per status line.
    pub status: std::sync::mpsc::Receiver<()>,
    /// The report, once the driver ends.
    pub stdout: std::thread::JoinHandle<String>,
    /// Everything on stderr, once the driver ends.
    pub stderr: std::thread::JoinHandle<String>,
}

/// Starts reading `child`'s piped stdout and stderr.
pub fn read_driver(child: &mut std::process::Child) -> DriverOutput {
    use std::io::{BufRead, BufReader, Read};
    let (tx, status) = std::sync::mpsc::channel::<()>();
    let err = child.stderr.take().expect("stderr piped");
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if l.contains(" current ops/sec;") {
                let _ = tx.send(());
            }
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let mut out = child.stdout.take().expect("stdout piped");
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    DriverOutput {
        status,
        stdout,
        stderr,
    }
}
