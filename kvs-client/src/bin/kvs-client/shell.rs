//! The interactive shell: `kvs-client` with no command. One connection
//! for the session, a prompt, line editing and history (rustyline), `help`,
//! and completion of command names. Each command waits for its answer;
//! values print in the shell's syntax ([`syntax::show`]), so that they can
//! be typed again.

use std::path::PathBuf;

use copyrpc::transport::Transport;
use kvs_client::{Client, KvError, OwnedReply};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{Editor, Helper, Highlighter, Hinter, Validator};

use crate::syntax::{self, Command, COMMANDS};

/// Completes the first word of a line to a command name.
#[derive(Helper, Highlighter, Hinter, Validator)]
struct Names;

impl Completer for Names {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let typed = line[..pos].trim_start();
        if typed.contains([' ', '\t']) {
            return Ok((pos, Vec::new()));
        }
        let lower = typed.to_lowercase();
        let names = COMMANDS
            .iter()
            .filter(|(name, ..)| name.starts_with(&lower))
            .map(|(name, ..)| Pair {
                display: name.to_string(),
                replacement: format!("{name} "),
            })
            .collect();
        Ok((pos - typed.len(), names))
    }
}

/// Where the history is kept: `$KVS_CLIENT_HISTORY`, else
/// `~/.kvs_client_history`; none without a home.
fn history_file() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KVS_CLIENT_HISTORY") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kvs_client_history"))
}

/// Runs the shell on `c` until `quit` or the end of input; `server` names
/// the prompt.
///
/// # Errors
/// The terminal could not be read.
pub fn run<X: Transport>(c: &mut Client<u64, X>, server: &str) -> Result<(), String> {
    let mut rl: Editor<Names, DefaultHistory> =
        Editor::new().map_err(|e| format!("the terminal: {e}"))?;
    rl.set_helper(Some(Names));
    let history = history_file();
    if let Some(h) = &history {
        // A first session has none yet.
        let _ = rl.load_history(h);
    }
    let prompt = format!("kvs {server}> ");
    println!("connected to {server}; help lists the commands");
    loop {
        let line = match rl.readline(&prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(format!("the terminal: {e}")),
        };
        if line.trim().is_empty() {
            continue;
        }
        let _ = rl.add_history_entry(line.as_str());
        if !one_line(c, &line) {
            break;
        }
    }
    if let Some(h) = &history {
        if let Err(e) = rl.save_history(h) {
            eprintln!("kvs-client: history not saved to {}: {e}", h.display());
        }
    }
    Ok(())
}

/// Runs one line; false if it asks to leave.
fn one_line<X: Transport>(c: &mut Client<u64, X>, line: &str) -> bool {
    let words = match syntax::words(line.as_bytes()) {
        Ok(w) => w,
        Err(e) => {
            println!("(error) {e}");
            return true;
        }
    };
    match words[0].to_ascii_lowercase().as_slice() {
        b"quit" | b"exit" => return false,
        b"help" => {
            print!("{}", syntax::help());
            return true;
        }
        _ => {}
    }
    match Command::parse(words) {
        Ok(cmd) => print!("{}", answer(&run_one(c, &cmd))),
        Err(e) => println!("(error) {e}"),
    }
    true
}

/// Sends `cmd` and waits for its answer.
pub fn run_one<X: Transport>(c: &mut Client<u64, X>, cmd: &Command) -> Result<OwnedReply, KvError> {
    match cmd {
        Command::Get(k) => c.wait_for(|c, t| c.get(k, t)),
        Command::Put(k, v) => c.wait_for(|c, t| c.put(k, v, t)),
        Command::Del(k) => c.wait_for(|c, t| c.delete(k, t)),
        Command::Scan(s, n) => c.wait_for(|c, t| c.scan(s, *n, t)),
    }
}

/// An answer as the shell prints it (lines, each ended).
fn answer(r: &Result<OwnedReply, KvError>) -> String {
    match r {
        Ok(OwnedReply::Value(v)) => format!("{}\n", syntax::show(v)),
        Ok(OwnedReply::Done) => "OK\n".into(),
        Ok(OwnedReply::NotFound) => "(not found)\n".into(),
        Ok(OwnedReply::Scan(recs, complete)) => {
            let mut s = String::new();
            for (i, (k, v)) in recs.iter().enumerate() {
                s.push_str(&format!(
                    "{}) {} {}\n",
                    i + 1,
                    syntax::show(k),
                    syntax::show(v)
                ));
            }
            if recs.is_empty() {
                s.push_str("(no records)\n");
            }
            if !complete {
                s.push_str("(incomplete: more records may follow)\n");
            }
            s
        }
        Err(e) => format!("(error) {e}\n"),
    }
}
