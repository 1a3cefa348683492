//! A member's metrics, scraped over HTTP and parsed by a Prometheus
//! text-format parser.
#![allow(dead_code)]

use std::net::SocketAddr;

use prometheus_parse::{Sample, Scrape, Value};

/// Every sample of the endpoint at `addr`; every line of the answer is a
/// comment or a sample the parser understood.
pub fn scrape(addr: SocketAddr) -> Vec<Sample> {
    let (code, head, body) = crate::support::http_get(addr, "/metrics");
    assert_eq!(code, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let lines = body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let parsed = Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap()
        .samples;
    let buckets: usize = parsed
        .iter()
        .map(|s| match &s.value {
            Value::Histogram(b) => b.len(),
            _ => 1,
        })
        .sum();
    assert_eq!(buckets, lines, "{body}");
    parsed
}

/// The sum of `metric`'s values whose labels include `want`.
pub fn sum(samples: &[Sample], metric: &str, want: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| want.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{metric}: {other:?}"),
        })
        .sum()
}
