#!/usr/bin/env python3
"""Scrapes storage hosts' /metrics and parses them with the Prometheus client
library's parser: the deploy test's check that the endpoint the role set up
serves the exposition format, and (with --min-operations N) that every host
served at least N operations.

    scrape.py [--min-operations N] HOST:PORT...

Prints one line per host; exits 1 when any host fails."""
import argparse
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(target):
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
        text = r.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    version = families["kvs_build_info"].samples[0].labels.get("version")
    member = families["kvs_member"].samples[0].value
    ops = sum(s.value for s in families["kvs_operations"].samples if s.name.endswith("_total"))
    return len(families), version, member, ops


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-operations", type=int, default=0)
    p.add_argument("targets", nargs="+")
    a = p.parse_args()
    failed = False
    for t in a.targets:
        try:
            n, version, member, ops = scrape(t)
        except Exception as e:  # any failure is this host's failure
            print(f"{t}: {type(e).__name__}: {e}", file=sys.stderr)
            failed = True
            continue
        print(f"{t}: {n} metric families, member {member:.0f}, version {version}, {ops:.0f} operations")
        if ops < a.min_operations:
            print(f"{t}: served {ops:.0f} operations, fewer than {a.min_operations}", file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
