#!/usr/bin/python3
"""opscheck.py -- what a fairq-proxy under test wrote, read back with real parsers.

Called by the integration tests in tests/it_proxy_ops.c (not a test of its
own): the scrape of /metrics is read by prometheus_client's parser (Debian's
python3-prometheus-client, hence Debian's interpreter), a JSON log line by
the json module, a logfmt line by a strict reader written to the format's
rules. Exit status 0 when every check passes; each failure is printed.

  opscheck.py metrics FLOOD FINAL --tenant T:PLAN:RUNS:SOURCE ... --flooding T
  opscheck.py logs json|logfmt FILE [--min-level L] [--require MSG[:KEY]]...
                                    [--forbid TEXT]...
"""
import argparse
import json
import math
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

LEVELS = ["debug", "info", "warn", "error"]
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
KEY = re.compile(r"[A-Za-z0-9_.-]+")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


# ---- metrics --------------------------------------------------------------

def samples(path):
    """(name, labels, value) of every sample, after the parser read it all."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, s.labels, s.value))
    check(out, f"{path}: no samples")
    return out


def value(ss, name, **labels):
    vals = [v for n, l, v in ss if n == name and all(l.get(k) == x for k, x in labels.items())]
    return vals[0] if len(vals) == 1 else None


def check_histogram(ss, path, tenant, runs):
    name = "fairq_tenant_submit_to_dispatch_seconds"
    buckets = sorted(((float(l["le"]), v) for n, l, v in ss
                      if n == name + "_bucket" and l.get("tenant") == tenant),
                     key=lambda b: b[0])
    if not check(buckets, f"{path}: no histogram for {tenant}"):
        return
    counts = [v for _, v in buckets]
    check(counts == sorted(counts), f"{path}: {tenant}'s buckets are not cumulative")
    check(math.isinf(buckets[-1][0]), f"{path}: {tenant}'s last bucket is not +Inf")
    check(buckets[-1][1] == value(ss, name + "_count", tenant=tenant) == runs,
          f"{path}: {tenant}'s histogram counts {buckets[-1][1]}, expected {runs}")
    check(value(ss, name + "_sum", tenant=tenant) >= 0, f"{path}: {tenant}'s sum")


def metrics(args):
    flood, final = samples(args.flood), samples(args.final)
    for path, ss in ((args.flood, flood), (args.final, final)):
        for n, l, _ in ss:
            if n.startswith("fairq_tenant_"):
                check("tenant" in l and "plan" in l, f"{path}: {n} {l} lacks tenant or plan")
        check(value(ss, "fairq_nats_connected") == 1, f"{path}: not connected")
        check(value(ss, "fairq_dispatch_lease_held") == 1, f"{path}: lease not held")
        check(value(ss, "fairq_in_flight_runs") <= value(ss, "fairq_window_capacity_runs"),
              f"{path}: more in flight than the window")
    loud = args.flooding
    check((value(flood, "fairq_tenant_queued_runs", tenant=loud) or 0) > 0,
          f"{args.flood}: {loud} has nothing queued during its flood")
    check((value(flood, "fairq_buffered_runs") or 0) > 0, f"{args.flood}: nothing buffered")
    for spec in args.tenant:
        tenant, plan, runs, source = spec.split(":")
        runs = int(runs)
        check(value(final, "fairq_tenant_dispatched_runs_total", tenant=tenant, plan=plan) == runs,
              f"{args.final}: {tenant} ({plan}) dispatched "
              f"{value(final, 'fairq_tenant_dispatched_runs_total', tenant=tenant)}, "
              f"expected {runs}")
        check(value(final, "fairq_tenant_queued_runs", tenant=tenant) == 0,
              f"{args.final}: {tenant} still has runs queued")
        check(value(final, "fairq_tenant_weight", tenant=tenant, source=source) is not None,
              f"{args.final}: {tenant}'s weight is not labelled source={source}")
        check_histogram(final, args.final, tenant, runs)
    print(f"opscheck: metrics: {len(flood)} and {len(final)} samples parsed, "
          f"{loud} had {value(flood, 'fairq_tenant_queued_runs', tenant=loud):.0f} "
          f"queued during the flood")


# ---- logs ------------------------------------------------------------------

def logfmt(line):
    """key=value pairs of one logfmt line, strictly: single spaces between
    pairs, keys of [A-Za-z0-9_.-], values bare or double-quoted with JSON
    string escapes. Raises ValueError on anything else."""
    fields, i = {}, 0
    while i < len(line):
        m = KEY.match(line, i)
        if not m or m.end() >= len(line) or line[m.end()] != "=":
            raise ValueError(f"no key= at column {i}")
        key, i = m.group(), m.end() + 1
        if line.startswith('"', i):
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            if j >= len(line):
                raise ValueError(f"unclosed quote in {key}")
            val = json.loads(line[i:j + 1])
            i = j + 1
        else:
            j = line.find(" ", i)
            j = len(line) if j < 0 else j
            val = line[i:j]
            if not val or any(c in val for c in '="\\'):
                raise ValueError(f"bad bare value of {key}")
            i = j
        if key in fields:
            raise ValueError(f"{key} given twice")
        fields[key] = val
        if i < len(line):
            if line[i] != " " or i + 1 == len(line):
                raise ValueError(f"no single space after {key}")
            i += 1
    if list(fields)[:3] != ["ts", "level", "msg"]:
        raise ValueError("does not start with ts, level, msg")
    return fields


def logs(args):
    with open(args.file, encoding="utf-8") as f:
        raw = f.read()
    events = []
    for n, line in enumerate(raw.splitlines(), 1):
        try:
            ev = json.loads(line) if args.format == "json" else logfmt(line)
            if not isinstance(ev, dict) or list(ev)[:3] != ["ts", "level", "msg"]:
                raise ValueError("not an object starting with ts, level, msg")
        except ValueError as e:
            check(False, f"{args.file}:{n}: not {args.format}: {e}: {line[:200]}")
            continue
        check(TS.match(str(ev["ts"])), f"{args.file}:{n}: ts {ev['ts']}")
        check(ev["level"] in LEVELS, f"{args.file}:{n}: level {ev['level']}")
        if args.min_level and ev["level"] in LEVELS:
            check(LEVELS.index(ev["level"]) >= LEVELS.index(args.min_level),
                  f"{args.file}:{n}: {ev['level']} line below {args.min_level}: {ev['msg']}")
        events.append(ev)
    for req in args.require:
        msg, _, key = req.partition(":")
        check(any(ev["msg"] == msg and (not key or key in ev) for ev in events),
              f"{args.file}: no line {msg!r}" + (f" with {key}" if key else ""))
    for text in args.forbid:
        check(text not in raw, f"{args.file}: {text!r} is written")
    print(f"opscheck: logs: {len(events)} {args.format} lines parsed from {args.file}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("metrics")
    m.add_argument("flood")
    m.add_argument("final")
    m.add_argument("--tenant", action="append", default=[])
    m.add_argument("--flooding", required=True)
    lg = sub.add_parser("logs")
    lg.add_argument("format", choices=["json", "logfmt"])
    lg.add_argument("file")
    lg.add_argument("--min-level", choices=LEVELS)
    lg.add_argument("--require", action="append", default=[])
    lg.add_argument("--forbid", action="append", default=[])
    args = ap.parse_args()
    try:
        metrics(args) if args.what == "metrics" else logs(args)
    except Exception as e:  # a parser's refusal is a failed check, with its reason
        check(False, f"{type(e).__name__}: {e}")
    for f in failures:
        print("opscheck: FAILED:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
