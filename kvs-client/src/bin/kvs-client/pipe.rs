//! `--pipe`: commands from stdin, one per line in the shell's syntax, with
//! `--depth` requests in flight on one connection, as `redis-cli --pipe`
//! loads a file. Answers are printed in the order of the lines: a GET's
//! value (or `(not found)`), a SCAN's records, and `(error) line N: ...`
//! for a line that failed; PUTs and DELs that succeed print nothing. A
//! summary goes to stderr at the end.
//!
//! The lines take effect in their order, as on one connection to Redis
//! (each line sees what the lines before it did), while lines on
//! different keys are in flight at once ([`Order`]).
//!
//! stdin is read on a thread of its own, so that a slow producer never
//! keeps the answers of the requests in flight from being read.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use copyrpc::transport::Transport;
use kvs_client::{Client, Reply, SubmitError};

use crate::syntax::{self, Command};

/// A line's outcome, kept until the lines before it are printed.
enum Outcome {
    /// Not answered yet.
    Pending,
    /// PUT or DEL done, or a line with no command: nothing to print.
    Quiet,
    /// GET or DEL of a missing key.
    NotFound,
    /// What to print: a value, or records.
    Print(String),
    /// The line failed.
    Failed(String),
}

/// What `--pipe` counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Lines with a command (blank lines and `#` comments are skipped).
    pub commands: u64,
    /// Commands answered OK (a GET or DEL of a missing key included).
    pub ok: u64,
    /// Of those, keys not found.
    pub not_found: u64,
    /// Lines that failed: syntax errors and failed requests.
    pub errors: u64,
}

/// Runs the lines of `input` through `c` with `depth` in flight, printing
/// to `out`; what was counted.
pub fn run<X: Transport>(
    c: &mut Client<u64, X>,
    input: Box<dyn Read + Send>,
    depth: usize,
    out: &mut dyn Write,
) -> std::io::Result<Summary> {
    let depth = depth.max(1);
    let batches = read_lines(input);
    let mut p = Pipe {
        window: (0..depth).map(|_| Outcome::Pending).collect(),
        head: 0,
        next: 0,
        summary: Summary::default(),
        out,
    };
    // Lines read and not yet in the window, numbered.
    let mut queue: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut read = 0u64;
    let mut held: Option<(u64, Command)> = None;
    let mut order = Order::new(depth);
    let mut eof = false;
    loop {
        if queue.is_empty() && !eof {
            match batches.try_recv() {
                Ok(b) => queue.extend(number(b, &mut read)),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => eof = true,
            }
        }
        // Fill the window: the line held back by a busy endpoint first.
        while p.next - p.head < depth as u64 {
            let (n, cmd) = match held.take() {
                Some(h) => h,
                None => match queue.pop_front() {
                    Some((n, line)) => match p.parse(n, &line) {
                        Some(cmd) => (n, cmd),
                        None => continue,
                    },
                    None => break,
                },
            };
            if !order.may_send(&cmd) {
                held = Some((n, cmd));
                break;
            }
            match submit(c, &cmd, n) {
                Ok(()) => order.sent(n, cmd),
                Err(SubmitError::Busy(_)) => {
                    held = Some((n, cmd));
                    break;
                }
                Err(e) => p.settle(n, Outcome::Failed(e.to_string())),
            }
        }
        let in_flight = p.next - p.head;
        if eof && queue.is_empty() && held.is_none() && in_flight == 0 {
            break;
        }
        if in_flight > 0 || held.is_some() {
            // Answers to read (and requests to send): spin, as a client
            // with requests in flight does.
            c.poll(|n, r| {
                order.answered(n);
                p.settle(n, outcome(r));
            });
        } else if queue.is_empty() && !eof {
            // Nothing in flight, nothing read: what was answered goes out
            // before waiting for the input.
            p.print_done()?;
            p.out.flush()?;
            match batches.recv_timeout(Duration::from_millis(100)) {
                Ok(b) => queue.extend(number(b, &mut read)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => eof = true,
            }
        }
        p.print_done()?;
    }
    p.print_done()?;
    p.out.flush()?;
    Ok(p.summary)
}

/// What a line in flight touches.
enum Flight {
    /// Nothing (its place in the window is free or settled).
    None,
    /// One key.
    Key(Vec<u8>),
    /// Any key: a SCAN.
    Scan,
}

/// The lines' order kept while they are in flight: a command waits while
/// an earlier one on its key is unanswered (a GET after a PUT of its key
/// sees it; a PUT after a GET does not change what the GET reads), and a
/// SCAN waits for every earlier command and holds back every later one.
/// Commands on other keys go out at once, up to the depth.
struct Order {
    /// Each line in flight, at `flights[n % depth]`.
    flights: Vec<Flight>,
    /// The commands in flight on each key.
    keys: HashMap<Vec<u8>, u32>,
    /// Commands in flight.
    sent: usize,
    /// Whether one of them is a SCAN.
    scanning: bool,
}

impl Order {
    fn new(depth: usize) -> Order {
        Order {
            flights: (0..depth).map(|_| Flight::None).collect(),
            keys: HashMap::new(),
            sent: 0,
            scanning: false,
        }
    }

    /// Whether `cmd` may go out now.
    fn may_send(&self, cmd: &Command) -> bool {
        match cmd {
            _ if self.scanning => false,
            Command::Scan(..) => self.sent == 0,
            _ => !self.keys.contains_key(cmd.key()),
        }
    }

    /// Line `n`'s `cmd` went out.
    fn sent(&mut self, n: u64, cmd: Command) {
        let d = self.flights.len() as u64;
        self.sent += 1;
        self.flights[(n % d) as usize] = match cmd {
            Command::Scan(..) => {
                self.scanning = true;
                Flight::Scan
            }
            Command::Get(k) | Command::Put(k, _) | Command::Del(k) => {
                *self.keys.entry(k.clone()).or_insert(0) += 1;
                Flight::Key(k)
            }
        };
    }

    /// Line `n` was answered.
    fn answered(&mut self, n: u64) {
        let d = self.flights.len() as u64;
        match std::mem::replace(&mut self.flights[(n % d) as usize], Flight::None) {
            Flight::None => return,
            Flight::Scan => self.scanning = false,
            Flight::Key(k) => {
                if let Some(c) = self.keys.get_mut(&k) {
                    *c -= 1;
                    if *c == 0 {
                        self.keys.remove(&k);
                    }
                }
            }
        }
        self.sent -= 1;
    }
}

/// The window of lines in flight or answered but not printed:
/// `head..next`, each at `window[n % depth]`.
struct Pipe<'a> {
    window: Vec<Outcome>,
    head: u64,
    next: u64,
    summary: Summary,
    out: &'a mut dyn Write,
}

impl Pipe<'_> {
    /// Takes line `n` into the window (every line takes a place, so that
    /// the answers print in order): its command, or `None` if it has none
    /// (blank, a comment, or a syntax error: settled at once).
    fn parse(&mut self, n: u64, line: &[u8]) -> Option<Command> {
        debug_assert_eq!(n, self.next, "lines enter in order");
        self.next = n + 1;
        let words = match syntax::words(line) {
            Ok(w) => w,
            Err(e) => return self.settle_now(n, Outcome::Failed(e.to_string())),
        };
        if words.is_empty() || words[0].first() == Some(&b'#') {
            self.put(n, Outcome::Quiet);
            return None;
        }
        match Command::parse(words) {
            Ok(c) => {
                self.summary.commands += 1;
                self.put(n, Outcome::Pending);
                Some(c)
            }
            Err(e) => self.settle_now(n, Outcome::Failed(e.to_string())),
        }
    }

    /// A line that failed before it was sent.
    fn settle_now(&mut self, n: u64, o: Outcome) -> Option<Command> {
        self.summary.commands += 1;
        self.settle(n, o);
        None
    }

    /// Line `n`'s answer.
    fn settle(&mut self, n: u64, o: Outcome) {
        match &o {
            Outcome::Failed(_) => self.summary.errors += 1,
            Outcome::NotFound => {
                self.summary.ok += 1;
                self.summary.not_found += 1;
            }
            _ => self.summary.ok += 1,
        }
        self.put(n, o);
    }

    /// Line `n`'s place in the window.
    fn put(&mut self, n: u64, o: Outcome) {
        let d = self.window.len() as u64;
        self.window[(n % d) as usize] = o;
    }

    /// Prints the answered lines at the window's head, in order.
    fn print_done(&mut self) -> std::io::Result<()> {
        let d = self.window.len() as u64;
        while self.head < self.next {
            let slot = &mut self.window[(self.head % d) as usize];
            match std::mem::replace(slot, Outcome::Pending) {
                Outcome::Pending => break,
                Outcome::Quiet => {}
                Outcome::NotFound => writeln!(self.out, "(not found)")?,
                Outcome::Print(s) => writeln!(self.out, "{s}")?,
                Outcome::Failed(e) => writeln!(self.out, "(error) line {}: {e}", self.head + 1)?,
            }
            self.head += 1;
        }
        Ok(())
    }
}

/// Sends `cmd`, tagged with its line.
fn submit<X: Transport>(
    c: &mut Client<u64, X>,
    cmd: &Command,
    n: u64,
) -> Result<(), SubmitError<u64>> {
    match cmd {
        Command::Get(k) => c.get(k, n),
        Command::Put(k, v) => c.put(k, v, n),
        Command::Del(k) => c.delete(k, n),
        Command::Scan(s, count) => c.scan(s, *count, n),
    }
}

/// What to print of an answer.
fn outcome(r: Result<Reply<'_>, kvs_client::KvError>) -> Outcome {
    match r {
        Ok(Reply::Value(v)) => Outcome::Print(syntax::show(v)),
        Ok(Reply::Done) => Outcome::Quiet,
        Ok(Reply::NotFound) => Outcome::NotFound,
        Ok(Reply::Scan(s)) => {
            let mut lines: Vec<String> = s
                .iter()
                .map(|(k, v)| format!("{} {}", syntax::show(k), syntax::show(v)))
                .collect();
            if !s.complete() {
                lines.push("(incomplete: more records may follow)".into());
            }
            Outcome::Print(lines.join("\n"))
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// `batch`'s lines, numbered on from `*read`.
fn number(batch: Vec<Vec<u8>>, read: &mut u64) -> impl Iterator<Item = (u64, Vec<u8>)> + '_ {
    batch.into_iter().map(move |l| {
        *read += 1;
        (*read - 1, l)
    })
}

/// The most lines handed over at once.
const BATCH: usize = 1024;

/// Reads `input`'s lines (without their line ends) on a thread of its own
/// and hands them over in batches: up to [`BATCH`] lines, or what the
/// input had ready (a slow producer's lines are not held back for more),
/// at most a few batches ahead of the pipe.
fn read_lines(input: Box<dyn Read + Send>) -> Receiver<Vec<Vec<u8>>> {
    let (tx, rx) = sync_channel(4);
    let mut input = BufReader::with_capacity(64 << 10, input);
    std::thread::Builder::new()
        .name("kvs-client-stdin".into())
        .spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                let mut line = Vec::new();
                let got = match input.read_until(b'\n', &mut line) {
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("kvs-client: reading stdin: {e}");
                        0
                    }
                };
                if got > 0 {
                    while matches!(line.last(), Some(b'\n' | b'\r')) {
                        line.pop();
                    }
                    batch.push(line);
                }
                // Nothing more buffered: the next read may block.
                let dry = got == 0 || input.buffer().is_empty();
                if (batch.len() >= BATCH || dry) && !batch.is_empty() {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    if tx.send(full).is_err() {
                        return;
                    }
                }
                if got == 0 {
                    return;
                }
            }
        })
        .expect("spawn the stdin reader");
    rx
}

/// The summary line, as stderr gets it.
pub fn summary_line(s: &Summary, took: Duration) -> String {
    let secs = took.as_secs_f64().max(1e-9);
    format!(
        "{} commands: {} ok ({} not found), {} errors in {:.2} s ({:.0}/s)",
        s.commands,
        s.ok,
        s.not_found,
        s.errors,
        secs,
        s.commands as f64 / secs
    )
}

/// Measures a run.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}
