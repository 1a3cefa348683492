//! Load recorded in a history ([`super::history`]): writes of each key's
//! next value and reads, alternating, from a client of its own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kvs_client::OwnedReply;

use super::history::{check, seq_of, value, History, Kind, Outcome, Summary};

/// Load on keys `first..first+keys`: writes of each key's next value and
/// reads, alternating, recorded in `h`, until `stop`.
pub fn load(
    h: Arc<History>,
    contact: SocketAddr,
    fabric: String,
    first: u32,
    keys: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = super::support::connect(contact, &fabric, Default::default()).unwrap();
        let mut seq = vec![0u64; keys as usize];
        let mut i = 0u32;
        while !stop.load(Ordering::Acquire) {
            let key = first + i % keys;
            let k = format!("k{key}");
            let t = h.now();
            if (i / keys) % 2 == 0 {
                let s = &mut seq[(key - first) as usize];
                *s += 1;
                let r = c.wait_for(|c, tag| c.put(k.as_bytes(), &value(key, *s), tag));
                let outcome = match r {
                    Ok(OwnedReply::Done) => Outcome::Ok,
                    _ => Outcome::Unknown,
                };
                h.record(key, Kind::Write(*s), t, outcome);
            } else {
                read(&mut c, &h, key);
            }
            i += 1;
        }
    })
}

pub fn read(c: &mut kvs_client::Client<u64>, h: &History, key: u32) {
    let k = format!("k{key}");
    let t = h.now();
    match c.wait_for(|c, tag| c.get(k.as_bytes(), tag)) {
        Ok(OwnedReply::Value(v)) => {
            let s = seq_of(key, &v).unwrap_or(u64::MAX);
            h.record(key, Kind::Read(Some(s)), t, Outcome::Ok);
        }
        Ok(OwnedReply::NotFound) => h.record(key, Kind::Read(None), t, Outcome::Ok),
        _ => h.record(key, Kind::Read(None), t, Outcome::Fail),
    }
}

/// After the load: reads keys `0..keys` once more, then every record
/// `preloaded` gives (each must read back as written), and checks the
/// history (every acknowledged write reads back, no read is stale).
pub fn read_back(
    c: &mut kvs_client::Client<u64>,
    h: &History,
    keys: u32,
    preloaded: impl Iterator<Item = (String, Vec<u8>)>,
) -> Summary {
    for key in 0..keys {
        read(c, h, key);
    }
    for (k, v) in preloaded {
        let r = c.wait_for(|c, t| c.get(k.as_bytes(), t));
        assert_eq!(r, Ok(OwnedReply::Value(v)), "{k}");
    }
    let ops = h.ops();
    check(&ops).unwrap_or_else(|e| panic!("{} violations: {:#?}", e.len(), &e[..e.len().min(10)]))
}
