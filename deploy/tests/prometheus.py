#!/usr/bin/env python3
"""Waits for what the deploy test expects of Prometheus, through its HTTP API.

  prometheus.py URL targets HOST...        every kvs target is up, one per HOST
  prometheus.py URL inputs RULES_FILE      every metric the rules read has series
  prometheus.py URL firing ALERT LABEL=VALUE...   ALERT fires with those labels
  prometheus.py URL resolved ALERT LABEL=VALUE... no such ALERT is pending or firing
  prometheus.py URL quiet                  no kvs alert fires

--timeout S (default 60) bounds the wait; on failure it prints what it saw
last and exits 1.
"""

import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request

import yaml


def get(url, path):
    with urllib.request.urlopen(url.rstrip("/") + path, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body}")
    return body["data"]


def targets(url, hosts):
    """(ok, what) for the job kvs's targets: one per host, each up."""
    ts = [t for t in get(url, "/api/v1/targets?state=active")["activeTargets"]
          if t["labels"].get("job") == "kvs"]
    seen = {t["labels"].get("host"): t for t in ts}
    what = ", ".join(f'{h} ({t["scrapeUrl"]}) {t["health"]}{": " + t["lastError"] if t["lastError"] else ""}'
                     for h, t in sorted(seen.items()))
    ok = sorted(seen) == sorted(hosts) and len(ts) == len(hosts) and all(t["health"] == "up" for t in ts)
    return ok, what or "no kvs target"


def inputs(url, rules_file):
    """(ok, what): every kvs_* metric the rules' expressions name has a series."""
    with open(rules_file) as f:
        groups = yaml.safe_load(f)["groups"]
    names = sorted({n for g in groups for r in g["rules"] for n in re.findall(r"\bkvs_[a-z0-9_]+", r["expr"])})
    q = urllib.parse.quote('count by (__name__) ({__name__=~"%s", job="kvs"})' % "|".join(names))
    found = {r["metric"]["__name__"] for r in get(url, "/api/v1/query?query=" + q)["result"]}
    missing = [n for n in names if n not in found]
    return not missing, f"missing: {', '.join(missing)}" if missing else f"all {len(names)} present"


def alerts(url):
    return get(url, "/api/v1/alerts")["alerts"]


def describe(a):
    labels = ",".join(f"{k}={v}" for k, v in sorted(a["labels"].items()) if k != "alertname")
    return f'{a["labels"]["alertname"]}{{{labels}}} {a["state"]}'


def matching(url, name, want):
    return [a for a in alerts(url)
            if a["labels"].get("alertname") == name
            and all(a["labels"].get(k) == v for k, v in want.items())]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("what", choices=["targets", "inputs", "firing", "resolved", "quiet"])
    p.add_argument("args", nargs="*")
    p.add_argument("--timeout", type=float, default=60)
    a = p.parse_args()
    deadline = time.monotonic() + a.timeout
    start = time.monotonic()
    last = "no answer yet"
    while True:
        try:
            if a.what == "targets":
                ok, last = targets(a.url, a.args)
            elif a.what == "inputs":
                ok, last = inputs(a.url, a.args[0])
            elif a.what == "quiet":
                firing = [describe(x) for x in alerts(a.url)
                          if x["state"] == "firing" and x["labels"]["alertname"].startswith("Kvs")]
                ok, last = not firing, "; ".join(firing) or "none firing"
            else:
                name, want = a.args[0], dict(kv.split("=", 1) for kv in a.args[1:])
                found = matching(a.url, name, want)
                if a.what == "firing":
                    ok = any(x["state"] == "firing" for x in found)
                else:
                    ok = not found
                every = [describe(x) for x in alerts(a.url)]
                last = "; ".join(every) or "no alert pending or firing"
        except (OSError, ValueError, RuntimeError) as e:
            ok, last = False, f"{type(e).__name__}: {e}"
        if ok:
            print(f"{a.what} {' '.join(a.args)}: after {time.monotonic() - start:.0f} s ({last})")
            return 0
        if time.monotonic() >= deadline:
            print(f"{a.what} {' '.join(a.args)}: not within {a.timeout:.0f} s; last seen: {last}")
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
