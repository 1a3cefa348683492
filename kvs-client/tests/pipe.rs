//! `kvs-client --pipe`: a file of commands through one connection, answers
//! printed in the lines' order, failed lines in place, a summary on
//! stderr; 100,000 lines against a cluster while a migration moves half
//! of its slots, every line answered.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};
use std::time::Duration;

use kvs_client::{ControlClient, ControlOptions};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::MemberId;

mod support;
use support::Cluster;

/// Starts `--pipe` with `args`; stdin and stdout piped.
fn pipe(c: &Cluster, args: &[&str]) -> Child {
    let mut all = vec!["--pipe"];
    all.extend_from_slice(args);
    c.client_command(&all)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kvs-client")
}

/// Everything a child printed on stdout and stderr, and its exit status,
/// once `input` is written to its stdin and stdin is closed.
fn finish(mut child: Child, input: &str) -> (String, String, Option<i32>) {
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let mut so = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        so.read_to_string(&mut s).unwrap();
        s
    });
    let err = stderr_of(&mut child);
    let out = reader.join().unwrap();
    let status = child.wait().unwrap();
    (out, err, status.code())
}

/// All a child prints on stderr, until it closes it.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    let mut e = child.stderr.take().unwrap();
    e.read_to_string(&mut err).unwrap();
    err
}

#[test]
fn failed_lines_print_in_place_and_the_summary_counts_them() {
    let c = Cluster::start("pipe-lines", 2);
    let child = pipe(&c, &["--depth", "4"]);
    let input = "put a 1\n\
                 get a\n\
                 # a comment\n\
                 \n\
                 get\n\
                 bogus x\n\
                 get \"unterminated\n\
                 get missing\n\
                 del missing\n\
                 put \"sp ace\" \"x y\\x00\"\r\n\
                 get \"sp ace\"\n\
                 scan a 2\n";
    let (out, err, code) = finish(child, input);
    assert_eq!(
        out,
        "1\n\
         (error) line 5: usage: get KEY\n\
         (error) line 6: unknown command 'bogus' (help lists them)\n\
         (error) line 7: unbalanced quotes\n\
         (not found)\n\
         (not found)\n\
         \"x y\\x00\"\n\
         a 1\n\
         \"sp ace\" \"x y\\x00\"\n",
        "stderr: {err}"
    );
    assert!(
        err.contains("10 commands: 7 ok (2 not found), 3 errors"),
        "{err}"
    );
    assert_eq!(code, Some(1), "a line failed: exit status 1");
}

#[test]
fn each_line_sees_what_the_lines_before_it_did() {
    // Two copies of each slot: a write's answer waits for its backup.
    let c = Cluster::start_with("pipe-order", 2, 2);
    let child = pipe(&c, &["--depth", "64"]);
    // Two hundred keys, each written, read, written again, read, deleted
    // and read, the keys' lines interleaved so that many are in flight.
    let mut input = String::new();
    let mut want = String::new();
    for step in 0..6 {
        for i in 0..200 {
            input.push_str(&match step {
                0 => format!("put k{i} first-{i}\n"),
                1 | 3 | 5 => format!("get k{i}\n"),
                2 => format!("put k{i} second-{i}\n"),
                _ => format!("del k{i}\n"),
            });
            match step {
                1 => want.push_str(&format!("first-{i}\n")),
                3 => want.push_str(&format!("second-{i}\n")),
                5 => want.push_str("(not found)\n"),
                _ => {}
            }
        }
    }
    // A scan sees every line before it, and the lines after it wait.
    input.push_str("put z1 a\nput z2 b\nscan z 10\nput z3 c\nscan z 10\n");
    want.push_str("z1 a\nz2 b\nz1 a\nz2 b\nz3 c\n");
    let (out, err, code) = finish(child, &input);
    assert_eq!(out, want, "stderr: {err}");
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_hundred_thousand_lines_are_all_answered_during_a_migration() {
    const KEYS: u32 = 40_000;
    const DELETED: u32 = 10_000;
    let c = Cluster::start("pipe-migration", 2);
    let mut child = pipe(&c, &["--depth", "64"]);
    let mut stdin = child.stdin.take().unwrap();
    // stdout is read as it comes, so that the child never blocks on it.
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || stdout.lines().map(Result::unwrap).collect::<Vec<_>>());
    let value = |i: u32| format!("value-{i}-{}", "x".repeat((i % 50) as usize));

    let mut lines = String::new();
    for i in 0..KEYS / 2 {
        lines.push_str(&format!("put k{i} {}\n", value(i)));
    }
    stdin.write_all(lines.as_bytes()).unwrap();

    // Half the slots move to member 1 while the rest of the file goes in.
    let mut cc: ControlClient = ControlClient::new(&c.device(), ControlOptions::default()).unwrap();
    let r = cc.request(
        c.addr(0),
        &ControlRequest::Migrate {
            first: 0,
            end: 128,
            to: MemberId(1),
        },
    );
    assert!(matches!(r, Ok(ControlReply::Started(_))), "{r:?}");
    assert!(child.try_wait().unwrap().is_none(), "the pipe ended early");

    let mut lines = String::new();
    for i in KEYS / 2..KEYS {
        lines.push_str(&format!("put k{i} {}\n", value(i)));
    }
    for i in 0..KEYS {
        lines.push_str(&format!("get k{i}\n"));
    }
    for i in 0..DELETED {
        lines.push_str(&format!("del k{i}\n"));
    }
    for i in 0..DELETED {
        lines.push_str(&format!("get k{i}\n"));
    }
    stdin.write_all(lines.as_bytes()).unwrap();
    test_support::wait_until(
        "the migration ends",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || match cc.request(c.addr(0), &ControlRequest::Status) {
            Ok(ControlReply::Status(s)) => s.migration.is_some_and(|m| m.finished),
            _ => false,
        },
    );
    drop(stdin);
    let err = stderr_of(&mut child);
    let out = reader.join().unwrap();
    let code = child.wait().unwrap().code();

    let mut want: Vec<String> = (0..KEYS).map(value).collect();
    want.extend((0..DELETED).map(|_| "(not found)".to_string()));
    assert_eq!(out.len(), want.len(), "stderr: {err}");
    for (i, (got, want)) in out.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "answer {i}; stderr: {err}");
    }
    assert!(
        err.contains("100000 commands: 100000 ok (10000 not found), 0 errors"),
        "{err}"
    );
    assert_eq!(code, Some(0), "{err}");
    match cc.request(c.addr(0), &ControlRequest::Status) {
        Ok(ControlReply::Status(s)) => {
            let m = s.migration.expect("the migration");
            assert!(m.error.is_none() && m.slots_done == 128, "{m:?}");
        }
        other => panic!("{other:?}"),
    }
}
