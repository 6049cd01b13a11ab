#!/usr/bin/env python3
"""nats-tap.py URL OUT [--dispatch SUBJECT --from S --to S [--rate R]]: count what crosses a NATS server.

A core NATS subscriber, in the plain text protocol (no client library), for
scripts/bench-replicas.sh. It subscribes to

  $KV.>          every KV write (a put is a publish to $KV.<bucket>.<key>):
                 the lease bucket's partition keys (p.<k>), registry keys
                 (r.<id>) and leader key are counted apart, the rest as other;
  fairq.share    the replicas' heartbeats (window.share), messages and bytes
                 (payload, and on the wire: the MSG line, payload and CRLFs);
  --dispatch S   (optional) the dispatch subject: each run's Fair-Tenant and
                 Fair-Est-Tokens headers, counted per tenant when it arrives
                 between --from and --to seconds after the tap started; with
                 the completions (--done, default fair.done.>), the runs in
                 flight (dispatched less completed since the start), their
                 peak and time-weighted mean over the same interval.
                 With --rate R (a worker's tokens a second), the tokens
                 the workers processed for each tenant within the interval
                 (as fairq-sim counts them, whatever the estimates said):
                 a completed run's actual_tokens, spent over the actual / R
                 seconds before its completion came, the part of that span
                 within the interval (the tenant the last token of the
                 completion's subject); a run dispatched and not completed
                 when the tap stops, R a second from its dispatch.

Each partition key's write is appended to OUT.owners as "owner K VALUE" as it
arrives, so the caller can tell who owns what (the key's value is its
owner's id, or "released"). SIGUSR1 starts the count again (zeroes it, and
the clock that --from and --to count from). On SIGTERM (or SIGINT) it writes one summary line
of key=value pairs to OUT and exits: the counts, and per second over the
time it ran.
"""
import json
import os
import signal
import socket
import sys
import time


def overlap(a, b, t_from, t_to):
    """The length of [a, b] within [t_from, t_to)."""
    return max(0.0, min(b, t_to) - max(a, t_from))


def serve(served, started, subj, body, now, rate, t_from, t_to):
    """Count the part of a completed run's work that fell within [t_from, t_to)."""
    try:
        done = json.loads(body)
        actual = int(done.get("actual_tokens", 0))
        started.pop(done.get("run_id"), None)
    except (ValueError, AttributeError, TypeError):
        return
    if actual <= 0:
        return
    start = now - actual / rate
    tenant = subj.rsplit(".", 1)[-1]
    served[tenant] = served.get(tenant, 0.0) + actual * overlap(start, now, t_from, t_to) / (now - start)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    url, out = args[0], args[1]
    opts = dict(zip(args[2::2], args[3::2]))
    dispatch = opts.get("--dispatch")
    t_from = float(opts.get("--from", "0"))
    t_to = float(opts.get("--to", "1e18"))
    done = opts.get("--done", "fair.done.>")
    rate = float(opts.get("--rate", "0"))
    host, port = url.split("//")[-1].split(",")[0].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"name":"nats-tap"}\r\n'
                 b"SUB $KV.> 1\r\nSUB fairq.share 2\r\n")
    if dispatch:
        sock.sendall(b"SUB %s 3\r\nSUB %s 4\r\n" % (dispatch.encode(), done.encode()))
    sock.sendall(b"PING\r\n")
    c = dict(kv_partition=0, kv_registry=0, kv_leader=0, kv_other=0, kv_bytes=0,
             share_msgs=0, share_bytes=0, share_wire_bytes=0)
    tenants = {}                    # tenant -> [runs, tokens] within [from, to]
    served = {}                     # tenant -> actual tokens processed within [from, to]
    started = {}                    # run id -> (tenant, when dispatched), not completed yet
    flight = dict(now=0, peak=0, area=0.0, at=None)     # dispatched less completed
    owners = open(out + ".owners", "a", buffering=1)
    t0 = time.monotonic()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    reset = []
    signal.signal(signal.SIGUSR1, lambda *_: reset.append(1))
    buf = bytearray()
    sock.settimeout(0.2)
    while not stop:
        if reset:
            reset.clear()
            c = dict.fromkeys(c, 0)
            tenants.clear()
            served.clear()
            started.clear()
            flight = dict(now=0, peak=0, area=0.0, at=None)
            t0 = time.monotonic()
        try:
            data = sock.recv(1 << 16)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        if not data:
            break
        buf += data
        while True:
            eol = buf.find(b"\r\n")
            if eol < 0:
                break
            line = bytes(buf[:eol])
            op = line.split(b" ", 1)[0].upper()
            if op in (b"MSG", b"HMSG"):
                f = line.split()
                total = int(f[-1])
                hlen = int(f[-2]) if op == b"HMSG" else 0
                if len(buf) < eol + 2 + total + 2:
                    break
                body = bytes(buf[eol + 2:eol + 2 + total])
                del buf[:eol + 2 + total + 2]
                subj = f[1].decode()
                if subj.startswith("$KV."):
                    parts = subj.split(".", 2)
                    key = parts[2] if len(parts) > 2 else ""
                    c["kv_bytes"] += total
                    if key.startswith("p."):
                        c["kv_partition"] += 1
                        owners.write("owner %s %s\n" % (key[2:], body[hlen:].decode(errors="replace") or "-"))
                    elif key.startswith("r."):
                        c["kv_registry"] += 1
                    elif key == "leader":
                        c["kv_leader"] += 1
                    else:
                        c["kv_other"] += 1
                elif subj == "fairq.share":
                    c["share_msgs"] += 1
                    c["share_bytes"] += total - hlen
                    c["share_wire_bytes"] += eol + 2 + total + 2
                elif dispatch:
                    now = time.monotonic() - t0
                    if t_from <= now < t_to:
                        if flight["at"] is not None:
                            flight["area"] += flight["now"] * (now - flight["at"])
                        flight["at"] = now
                    flight["now"] += 1 if subj == dispatch else -1
                    if t_from <= now < t_to:
                        flight["peak"] = max(flight["peak"], flight["now"])
                    h = {}
                    if subj == dispatch:
                        for hl in body[:hlen].split(b"\r\n")[1:]:
                            k, _, v = hl.partition(b":")
                            h[k.strip().lower()] = v.strip().decode(errors="replace")
                        if rate > 0:
                            started[h.get(b"fair-run-id")] = (h.get(b"fair-tenant", "?"), now)
                    if subj == dispatch and t_from <= now < t_to:
                        t = tenants.setdefault(h.get(b"fair-tenant", "?"), [0, 0])
                        t[0] += 1
                        t[1] += int(h.get(b"fair-est-tokens", "0") or 0)
                    elif subj != dispatch and rate > 0:
                        serve(served, started, subj, body[hlen:], now, rate, t_from, t_to)
                continue
            del buf[:eol + 2]
            if op == b"PING":
                sock.sendall(b"PONG\r\n")
            elif op == b"-ERR":
                print("nats-tap: " + line.decode(errors="replace"), file=sys.stderr)
    secs = time.monotonic() - t0
    kv = c["kv_partition"] + c["kv_registry"] + c["kv_leader"] + c["kv_other"]
    per_s = lambda n: "%.1f" % (n / secs if secs else 0)
    line = ["tap", "secs=%.1f" % secs, "kv_writes=%d" % kv, "kv_writes_per_s=" + per_s(kv)]
    for k in ("kv_partition", "kv_registry", "kv_leader", "kv_other"):
        line.append("%s_per_s=%s" % (k, per_s(c[k])))
    line += ["kv_bytes_per_s=" + per_s(c["kv_bytes"]), "share_msgs=%d" % c["share_msgs"],
             "share_msgs_per_s=" + per_s(c["share_msgs"]),
             "share_bytes_per_s=" + per_s(c["share_bytes"]),
             "share_wire_bytes_per_s=" + per_s(c["share_wire_bytes"])]
    if dispatch:
        span = min(secs, t_to) - t_from
        line += ["in_flight_mean=%.1f" % (flight["area"] / span if span > 0 else 0),
                 "in_flight_peak=%d" % flight["peak"]]
    for t in sorted(tenants):
        line += ["runs_%s=%d" % (t, tenants[t][0]), "tokens_%s=%d" % (t, tenants[t][1])]
    for tenant, at in started.values():
        served[tenant] = served.get(tenant, 0.0) + rate * overlap(at, secs, t_from, t_to)
    for t in sorted(served):
        line += ["served_%s=%d" % (t, round(served[t]))]
    with open(out, "w") as f:
        f.write(" ".join(line) + "\n")
    os._exit(0)


if __name__ == "__main__":
    main()
