#!/usr/bin/python3
"""sim_cli_test.py -- fairq-sim as a person runs it: every format parses, the columns are the
ones docs/sim.md documents, the example trace regenerates, the chart renders, bad input fails
with a position and a non-zero exit."""
import csv
import io
import json
import os
import re
import subprocess
import tempfile
import unittest

SRC = os.environ.get("FAIRQ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("FAIRQ_BUILD_DIR", os.path.join(SRC, "build"))
SIM = os.path.join(BUILD, "fairq-sim")
SCENARIOS = os.path.join(SRC, "config", "scenarios")


def sim(*args, check=True):
    p = subprocess.run([SIM, *args], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"fairq-sim {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    return p


def scenario(name):
    return os.path.join(SCENARIOS, name + ".yaml")


def documented_columns(heading):
    """The column names listed as `name` bullets under a heading of docs/sim.md."""
    with open(os.path.join(SRC, "docs", "sim.md")) as f:
        text = f.read()
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- `([a-z0-9_]+)`", section, re.M)


class SimCli(unittest.TestCase):
    def test_json_has_every_scenario_and_policy(self):
        names = sorted(f[:-5] for f in os.listdir(SCENARIOS) if f.endswith(".yaml"))
        out = sim("-f", "json", *[scenario(n) for n in names]).stdout
        doc = json.loads(out)
        self.assertEqual(sorted(s["scenario"] for s in doc["scenarios"]), names)
        for s in doc["scenarios"]:
            self.assertEqual([p["policy"] for p in s["policies"]],
                             ["fifo", "rr", "cap", "drr", "drr-no-reconcile",
                              "drr-no-correction", "drr-no-idle-reset", "drr-cap",
                              "drr-burst", "drr-rate", "drr-priced", "drr-class", "drr-sub",
                              "drr-class-sub", "drr-replicas"])
            for p in s["policies"]:
                o = p["overall"]
                self.assertEqual(o["submitted"], o["completed"] + o["rejected"] + o["left"])
                self.assertEqual(len(p["tenants"]), s["tenants"])

    def test_csv_columns_are_documented(self):
        out = sim("-f", "csv", "-p", "fifo,drr", scenario("enterprise")).stdout
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertEqual(list(rows[0].keys()), documented_columns("## Report CSV"))
        overall = [r for r in rows if r["tenant"] == "*"]
        self.assertEqual([r["policy"] for r in overall], ["fifo", "drr"])
        drr = [r for r in rows if r["policy"] == "drr" and r["tenant"] != "*"]
        self.assertAlmostEqual(sum(float(r["share"]) for r in drr), 1.0, places=4)

    def test_waits_csv_and_chart(self):
        with tempfile.TemporaryDirectory() as tmp:
            waits = os.path.join(tmp, "waits.csv")
            sim("-p", "fifo,drr", "--waits", waits, "-o", os.path.join(tmp, "report.txt"),
                scenario("tuesday"))
            with open(waits) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual(list(rows[0].keys()), documented_columns("## Waits CSV"))
            self.assertEqual(len(rows), 2 * 954)
            for r in rows:
                self.assertEqual(int(r["wait_ms"]),
                                 int(r["dispatched_ms"]) - int(r["submitted_ms"]))
            for ext, magic in (("png", b"\x89PNG"), ("svg", b"<?xml")):
                out = os.path.join(tmp, "chart." + ext)
                subprocess.run([os.path.join(SRC, "scripts", "sim-chart.sh"), waits, out],
                               check=True, capture_output=True, timeout=120)
                with open(out, "rb") as f:
                    self.assertTrue(f.read(8).startswith(magic))
                self.assertGreater(os.path.getsize(out), 10000)

    def test_example_trace_regenerates_and_replays(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "tuesday.csv")
            sim("--emit-trace", trace, scenario("tuesday"))
            with open(trace) as a, open(os.path.join(SRC, "config", "traces", "tuesday.csv")) as b:
                self.assertEqual(a.read(), b.read())
            direct = sim("-f", "csv", scenario("tuesday")).stdout
            replay = sim("-f", "csv", "--trace", trace, scenario("tuesday")).stdout
            self.assertEqual(direct, replay)
            alone = sim("-p", "drr", "--trace", trace).stdout
            self.assertIn("10 workers x 25 tok/s", alone)

    def test_seed_changes_the_runs(self):
        a = sim("-f", "csv", "-p", "drr", scenario("overload")).stdout
        b = sim("-f", "csv", "-p", "drr", "--seed", "2", scenario("overload")).stdout
        self.assertNotEqual(a, b)
        self.assertEqual(b, sim("-f", "csv", "-p", "drr", "-s", "2", scenario("overload")).stdout)

    def test_bad_input(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "bad.yaml")
            with open(scenario("tuesday")) as f:
                text = f.read()
            with open(bad, "w") as f:
                f.write(text.replace("quantum_tokens: 1000", "quantum_tokens: 1000\nquantom: 5"))
            line = text.split("\n").index("quantum_tokens: 1000") + 2
            p = sim(bad, check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn(f"bad.yaml:{line}:1: Unexpected key: quantom", p.stderr)
            trace = os.path.join(tmp, "t.csv")
            with open(trace, "w") as f:
                f.write("tenant,submitted_at_ms,workflow,est_tokens,actual_tokens\na,x,w,1,1\n")
            p = sim("--trace", trace, check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("t.csv:2: submitted_at_ms", p.stderr)
            # No document at all: refused, not followed as a NULL scenario.
            for text in ("", "# nothing but a comment\n"):
                with open(bad, "w") as f:
                    f.write(text)
                p = sim(bad, check=False)
                self.assertEqual(p.returncode, 1)
                self.assertIn("bad.yaml: no scenario", p.stderr)
        self.assertEqual(sim("-p", "lottery", scenario("tuesday"), check=False).returncode, 2)
        self.assertEqual(sim("-f", "xml", scenario("tuesday"), check=False).returncode, 2)
        self.assertEqual(sim(check=False).returncode, 2)
        self.assertEqual(sim("--seed", "2", "--trace", os.path.join(SRC, "config", "traces",
                                                                     "tuesday.csv"),
                             check=False).returncode, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
