//! Authentication and roles: a server with an auth token refuses clients
//! with a wrong token or none, each told why, and serves the one with the
//! right token; only the cluster token opens the control endpoint (the
//! client token is refused there, and counted); short or equal tokens are
//! refused at start; no token is ever printed; without a token the server
//! will not listen on a non-loopback address unless told to.

use kvs_client::{
    AuthToken, ClientOptions, ConnectError, ControlClient, ControlOptions, OwnedReply,
};
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_proto::{MemberId, RequestId, Ticket};
use kvs_server::{Config, Server, StartError};
use mlx5::sim::fabric::Fabric;

mod support;
use support::{connect, run_server, temp_dir, test_config, write_file, ServerProcess};

const TOKEN: &str = "tok-7f3a9c1e5b2d";
const CLUSTER_TOKEN: &str = "cluster-9d2e4f6a8b1c";

/// A control client presenting `t`.
fn control(fabric: &str, t: Option<&str>) -> ControlClient {
    let opts = ControlOptions {
        cluster_token: t.map(|t| AuthToken::new(t).unwrap()),
        ..ControlOptions::default()
    };
    ControlClient::new(&support::client_device(fabric), opts).unwrap()
}

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
    let cluster_file = dir.join("cluster-token");
    write_file(&cluster_file, CLUSTER_TOKEN, 0o600);
    let fabric = format!("kvs-auth-{}", std::process::id());
    let server = Server::start(Config {
        auth_token_file: Some(file.clone()),
        cluster_token_file: Some(cluster_file.clone()),
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
    assert_eq!(
        (s.refused_auth, s.refused_role, s.refused_hello),
        (2, 0, 0),
        "{s:?}"
    );
    // The client token cannot reach the control endpoint: no status, no
    // map, no join; the refusal says why and is counted as a role refusal.
    let mut cc = control(&fabric, Some(TOKEN));
    let e = cc.request(addr, &ControlRequest::Status).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("the client token cannot issue control operations"),
        "{m}"
    );
    assert!(!m.contains(TOKEN), "{m}");
    let mut none = control(&fabric, None);
    let m = none
        .request(addr, &ControlRequest::Map)
        .unwrap_err()
        .to_string();
    assert!(m.contains("requires the cluster token"), "{m}");
    // The acceptor publishes its counts after it answers.
    test_support::wait_until(
        "the refusals counted",
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(5),
        || {
            let s = server.setup_stats();
            (s.refused_auth, s.refused_role) == (3, 1)
        },
    );
    // The cluster token does.
    let mut cc = control(&fabric, Some(CLUSTER_TOKEN));
    match cc.request(addr, &ControlRequest::Status).unwrap() {
        ControlReply::Status(st) => assert_eq!(st.member, MemberId(0)),
        other => panic!("{other:?}"),
    }
    // Members and kvs-admin may use the data path with it too.
    let mut d = connect(addr, &fabric, with_token(Some(CLUSTER_TOKEN))).unwrap();
    let r = d.wait_for(|c, t| c.get(&[1], t)).unwrap();
    assert_eq!(r, OwnedReply::Value(vec![1; 3]));
    drop((c, d, cc));
    server.shutdown();
    let start = |client: &std::path::Path, cluster: &std::path::Path| {
        Server::start(Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            device: "sim1".into(),
            fabric: Some(fabric.clone()),
            auth_token_file: Some(client.to_owned()),
            cluster_token_file: Some(cluster.to_owned()),
            ..Config::default()
        })
        .unwrap_err()
    };
    // A token shorter than 16 bytes is refused at start, whichever it is.
    let short = dir.join("short");
    write_file(&short, "fifteen-bytes-x", 0o600);
    let e = start(&short, &cluster_file);
    assert!(
        matches!(
            e,
            StartError::Token {
                key: "auth_token_file",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("at least 16"), "{e}");
    let e = start(&file, &short);
    assert!(
        matches!(
            e,
            StartError::Token {
                key: "cluster_token_file",
                ..
            }
        ),
        "{e}"
    );
    // Two files holding one token: the roles would be one.
    let copy = dir.join("copy");
    write_file(&copy, TOKEN, 0o600);
    let e = start(&file, &copy);
    assert!(matches!(e, StartError::SameTokens), "{e}");
    // A token file others can read is refused at start.
    write_file(&file, TOKEN, 0o644);
    let e = start(&file, &cluster_file);
    assert!(matches!(e, StartError::Token { .. }), "{e}");
    assert!(e.to_string().contains("chmod 600"), "{e}");
    Fabric::remove_if_unused(&fabric);
}

#[test]
fn the_server_never_prints_the_token() {
    let dir = temp_dir("auth-log");
    let file = dir.join("token");
    write_file(&file, TOKEN, 0o600);
    let cluster_file = dir.join("cluster-token");
    write_file(&cluster_file, CLUSTER_TOKEN, 0o600);
    let fabric = format!("kvs-auth-log-{}", std::process::id());
    let server = ServerProcess::start_on(
        &fabric,
        &[
            "--auth-token-file",
            file.to_str().unwrap(),
            "--cluster-token-file",
            cluster_file.to_str().unwrap(),
        ],
    );
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
    assert!(!out.contains(CLUSTER_TOKEN), "{out}");
    Fabric::remove_if_unused(&fabric);
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
    assert!(
        out.contains(" WARN kvs_server: no auth token (allow_unauthenticated)"),
        "{out}"
    );
    // The same from a configuration file.
    let dir = temp_dir("auth-open");
    let cfg = dir.join("kvs.toml");
    write_file(&cfg, "listen = \"0.0.0.0:0\"\n", 0o644);
    let (status, out) = run_server(&["--config", cfg.to_str().unwrap(), "--fabric", &fabric]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("allow_unauthenticated"), "{out}");
    // Tokens given as flags complete a file that listens everywhere; a
    // client token alone is not enough, it needs the cluster token beside it.
    let token = dir.join("token");
    write_file(&token, TOKEN, 0o600);
    let cluster_token = dir.join("cluster-token");
    write_file(&cluster_token, CLUSTER_TOKEN, 0o600);
    let (status, out) = run_server(&[
        "--config",
        cfg.to_str().unwrap(),
        "--fabric",
        &fabric,
        "--auth-token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("cluster_token_file"), "{out}");
    let s = ServerProcess::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--fabric",
        &fabric,
        "--device",
        "sim1",
        "--auth-token-file",
        token.to_str().unwrap(),
        "--cluster-token-file",
        cluster_token.to_str().unwrap(),
    ]);
    let out = s.output();
    assert!(!out.contains(" WARN "), "{out}");
    Fabric::remove_if_unused(&fabric);
}

/// A replication message, the begin of a copy of slot 0 (what empties a
/// backup's copy of the slot), sent to worker 0 of `addr` on a raw copyrpc
/// connection presenting `token`: the answer's status byte and message.
fn copy_begin_as(addr: std::net::SocketAddr, fabric: &str, token: &str) -> (u8, String) {
    use kvs_proto::replica::{write_replicate, CopyBegin, Header, Kind};
    use std::cell::RefCell;
    use std::rc::Rc;
    let dev = support::client_device(fabric);
    let got: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
    let g = got.clone();
    let mut ctx = copyrpc::ContextBuilder::new()
        .ring_size(Config::default().ring_size)
        .build(
            &dev,
            move |_: u32, r: Result<&[u8], copyrpc::CallFailed>| {
                *g.borrow_mut() = Some(r.map(<[u8]>::to_vec).unwrap_or_default());
            },
        )
        .unwrap();
    let t = AuthToken::new(token).unwrap();
    let conn = copyrpc::conn::connect_with(addr, &mut ctx, &kvs_proto::hello(0, Some(&t))).unwrap();
    let begin = CopyBegin {
        ticket: Ticket::from_bytes([7; 16]),
        first: 0,
        end: 1,
        records: 0,
        bytes: 0,
        stream: 0,
    };
    let h = Header {
        kind: Kind::CopyBegin,
        slot: 0,
        epoch: 1,
        primary: kvs_proto::Owner {
            member: MemberId(0),
            worker: 0,
        },
        seq: 0,
        offset: 0,
        id: RequestId::default(),
    };
    let mut req = Vec::new();
    write_replicate(&mut req, &h, &begin.ticket.bytes(), &begin.value());
    ctx.call(conn.endpoint(), &req, 1024, 0).unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got.borrow().is_none() {
        assert!(std::time::Instant::now() < until, "no answer");
        ctx.poll();
    }
    let out = got.borrow_mut().take().unwrap();
    assert!(out.len() >= kvs_proto::proto::RESPONSE_HEADER, "{out:?}");
    let msg = String::from_utf8_lossy(&out[kvs_proto::proto::RESPONSE_HEADER..]).into_owned();
    (out[0], msg)
}

#[test]
fn the_client_token_cannot_send_replication_messages() {
    let dir = temp_dir("auth-role");
    let file = dir.join("token");
    write_file(&file, TOKEN, 0o600);
    let cluster_file = dir.join("cluster-token");
    write_file(&cluster_file, CLUSTER_TOKEN, 0o600);
    let fabric = format!("kvs-auth-role-{}", std::process::id());
    let server = Server::start(Config {
        auth_token_file: Some(file),
        cluster_token_file: Some(cluster_file),
        ..test_config(&fabric)
    })
    .unwrap();
    // With the client token: refused for its role, saying so, and counted.
    let (st, m) = copy_begin_as(server.addr(), &fabric, TOKEN);
    assert_eq!(
        kvs_proto::proto::Status::from_u8(st),
        Some(kvs_proto::proto::Status::Forbidden),
        "{m}"
    );
    assert!(
        m.contains("replication") && m.contains("cluster token"),
        "{m}"
    );
    assert!(!m.contains(TOKEN), "{m}");
    test_support::wait_until(
        "the refusal counted",
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(5),
        || server.setup_stats().refused_member_ops == 1,
    );
    // With the cluster token the message is a member's: looked at as one
    // (this server backs nothing up, so it is fenced, not forbidden).
    let (st, m) = copy_begin_as(server.addr(), &fabric, CLUSTER_TOKEN);
    assert_eq!(
        kvs_proto::proto::Status::from_u8(st),
        Some(kvs_proto::proto::Status::Fenced),
        "{m}"
    );
    assert_eq!(server.setup_stats().refused_member_ops, 1);
    // A client with the client token still reads and writes.
    let mut c = connect(server.addr(), &fabric, with_token(Some(TOKEN))).unwrap();
    c.wait_for(|c, t| c.put(b"k", b"v", t)).unwrap();
    drop(c);
    server.shutdown();
    Fabric::remove_if_unused(&fabric);
}
