//! Authentication: a server with an auth token refuses clients with a wrong
//! token or none, each told why, and serves the one with the right token; the
//! token is never printed; without a token the server will not listen on a
//! non-loopback address unless told to.

use kvs_client::{AuthToken, ClientOptions, ConnectError, OwnedReply};
use kvs_server::{Config, Server, StartError};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, run_server, temp_dir, test_config, write_file, ServerProcess};

const TOKEN: &str = "tok-7f3a9c1e5b2d";

fn with_token(t: Option<&str>) -> ClientOptions {
    ClientOptions {
        auth_token: t.map(|t| AuthToken::new(t).unwrap()),
        ..ClientOptions::default()
    }
}

#[test]
fn a_wrong_token_and_no_token_are_refused_and_the_right_one_is_served() {
    let dir = temp_dir("auth");
    let file = dir.join("token");
    write_file(&file, &format!("{TOKEN}\n"), 0o600);
    let fabric = format!("kvs-auth-{}", std::process::id());
    let server = Server::start(Config {
        auth_token_file: Some(file.clone()),
        ..test_config(&fabric)
    })
    .unwrap();
    let addr = server.addr();
    // A wrong token: one character off, same length.
    match connect(addr, &fabric, with_token(Some("tok-7f3a9c1e5b2e"))) {
        Err(ConnectError::Refused(why)) => assert_eq!(why, "wrong auth token"),
        other => panic!("{other:?}"),
    }
    // No token.
    match connect(addr, &fabric, with_token(None)) {
        Err(e @ ConnectError::Refused(_)) => {
            let m = e.to_string();
            assert!(
                m.contains("requires an auth token and none was given")
                    && m.contains("--auth-token-file"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The right one, read from a file as a client would.
    let token = kvs_client::auth_token(Some(&file)).unwrap();
    let mut c = connect(
        addr,
        &fabric,
        ClientOptions {
            auth_token: token,
            ..with_token(None)
        },
    )
    .unwrap();
    assert_eq!(c.map().members()[0].workers, 2);
    for k in 0..20u8 {
        c.wait_for(|c, t| c.put(&[k], &[k; 3], t)).unwrap();
    }
    for k in 0..20u8 {
        let r = c.wait_for(|c, t| c.get(&[k], t)).unwrap();
        assert_eq!(r, OwnedReply::Value(vec![k; 3]));
    }
    let s = server.setup_stats();
    assert_eq!((s.refused_auth, s.refused_hello), (2, 0), "{s:?}");
    drop(c);
    server.shutdown();
    // A token file others can read is refused at start.
    write_file(&file, TOKEN, 0o644);
    let e = Server::start(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        device: "sim1".into(),
        fabric: Some(fabric.clone()),
        auth_token_file: Some(file),
        ..Config::default()
    })
    .unwrap_err();
    assert!(matches!(e, StartError::Auth(_)), "{e}");
    assert!(e.to_string().contains("chmod 600"), "{e}");
    Fabric::remove_if_unused(&fabric);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_server_never_prints_the_token() {
    let dir = temp_dir("auth-log");
    let file = dir.join("token");
    write_file(&file, TOKEN, 0o600);
    let fabric = format!("kvs-auth-log-{}", std::process::id());
    let server = ServerProcess::start_on(&fabric, &["--auth-token-file", file.to_str().unwrap()]);
    let wrong = "tok-wrong-0123456";
    match connect(server.addr, &fabric, with_token(Some(wrong))) {
        Err(ConnectError::Refused(why)) => assert_eq!(why, "wrong auth token"),
        other => panic!("{other:?}"),
    }
    let mut c = connect(server.addr, &fabric, with_token(Some(TOKEN)))
        .unwrap_or_else(|e| panic!("{e}: {}", server.printed()));
    c.wait_for(|c, t| c.put(b"k", b"v", t)).unwrap();
    drop(c);
    let out = server.output();
    assert!(
        out.contains("refused a client from 127.0.0.1:") && out.contains("wrong auth token"),
        "{out}"
    );
    assert!(!out.contains(TOKEN) && !out.contains(wrong), "{out}");
    Fabric::remove_if_unused(&fabric);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_a_token_only_loopback_unless_allowed() {
    let fabric = format!("kvs-auth-open-{}", std::process::id());
    let base = [
        "--device",
        "sim1",
        "--fabric",
        &fabric,
        "--stats-interval",
        "0",
        "--listen",
    ];
    let (status, out) = run_server(&[&base[..], &["0.0.0.0:0"]].concat());
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("without auth_token_file") && out.contains("allow_unauthenticated"),
        "{out}"
    );
    // Told to, it listens on every address, and says what that means.
    let open =
        ServerProcess::start(&[&base[..], &["0.0.0.0:0", "--allow-unauthenticated"]].concat());
    let out = open.output();
    assert!(out.contains("WARNING: no auth token"), "{out}");
    // The same from a configuration file.
    let dir = temp_dir("auth-open");
    let cfg = dir.join("kvs.toml");
    write_file(&cfg, "listen = \"0.0.0.0:0\"\n", 0o644);
    let (status, out) = run_server(&["--config", cfg.to_str().unwrap(), "--fabric", &fabric]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("allow_unauthenticated"), "{out}");
    // A token given as a flag completes a file that listens everywhere.
    let token = dir.join("token");
    write_file(&token, TOKEN, 0o600);
    let s = ServerProcess::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--fabric",
        &fabric,
        "--device",
        "sim1",
        "--auth-token-file",
        token.to_str().unwrap(),
    ]);
    let out = s.output();
    assert!(!out.contains("WARNING"), "{out}");
    Fabric::remove_if_unused(&fabric);
    std::fs::remove_dir_all(&dir).unwrap();
}
