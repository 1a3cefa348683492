//! The connecting side's TCP connection by a deadline.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use setup_conn::connect_by;

#[test]
fn a_listener_is_reached_with_nodelay() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = connect_by(
        l.local_addr().unwrap(),
        Instant::now() + Duration::from_secs(5),
    )
    .unwrap();
    assert!(s.nodelay().unwrap());
}

#[test]
fn a_closed_port_a_passed_deadline_and_no_address_fail_apart() {
    // A port nobody listens on (bound, then closed).
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let soon = Instant::now() + Duration::from_secs(5);
    let e = connect_by(addr, soon).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    let e = connect_by(addr, Instant::now()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    let none: &[SocketAddr] = &[];
    let e = connect_by(none, soon).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
}
