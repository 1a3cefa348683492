//! The interactive shell, typed into through a pseudo-terminal: commands
//! and their answers, quoting both ways, `help`, errors that leave the
//! shell running, Tab completion of command names, and history kept
//! across sessions.

use rexpect::session::{spawn_command, PtySession};

mod support;
use support::Cluster;

/// The shell against `c`, its history under `home`.
fn shell(c: &Cluster, home: &std::path::Path) -> PtySession {
    let mut cmd = c.client_command(&[]);
    cmd.env("HOME", home).env("TERM", "xterm");
    cmd.env_remove("KVS_CLIENT_HISTORY");
    let mut p = spawn_command(cmd, Some(20_000)).expect("start the shell");
    p.exp_string("connected to").expect("the greeting");
    p
}

/// Types `line` and waits for `answer`.
fn answered(p: &mut PtySession, line: &str, answer: &str) {
    p.send_line(line).unwrap();
    if let Err(e) = p.exp_string(answer) {
        panic!("{line}: no {answer:?}: {e}");
    }
}

#[test]
fn commands_answers_completion_and_history() {
    let c = Cluster::start("shell", 2);
    let home = test_support::TempDir::new("kvs-client", "shell-home");
    let mut p = shell(&c, &home);
    answered(&mut p, "put greeting \"hello world\"", "OK");
    answered(&mut p, "get greeting", "\"hello world\"");
    answered(&mut p, "put bin \"\\x00\\xff\"", "OK");
    answered(&mut p, "get bin", "\"\\x00\\xff\"");
    answered(&mut p, "GET nothing", "(not found)");
    answered(&mut p, "help", "prints up to COUNT records");
    answered(&mut p, "set a b", "(error) unknown command 'set'");
    answered(&mut p, "get \"open", "(error) unbalanced quotes");
    answered(&mut p, "del bin", "OK");
    answered(&mut p, "get bin", "(not found)");
    // Tab completes "sc" to "scan ".
    p.send("sc").unwrap();
    p.send("\t").unwrap();
    answered(&mut p, "greeting 5", "1) greeting \"hello world\"");
    p.send_line("quit").unwrap();
    p.exp_eof().expect("quit ends the shell");

    let history = std::fs::read_to_string(home.join(".kvs_client_history")).unwrap();
    assert!(history.contains("get greeting"), "{history}");
    assert!(history.contains("scan greeting 5"), "{history}");

    // A new session recalls the last session's lines with the up arrow:
    // quit, then the scan before it.
    let mut p = shell(&c, &home);
    p.send("\x1b[A").unwrap();
    p.send("\x1b[A").unwrap();
    answered(&mut p, "", "1) greeting \"hello world\"");
    p.send_control('d').unwrap();
    p.exp_eof().expect("Ctrl-D ends the shell");
}
