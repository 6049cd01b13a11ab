#!/usr/bin/python3
"""metrics_test.py -- fairq's /metrics text read by the real Prometheus parser, and checked against docs/metrics.md.

test_metrics (the cmocka test of lib/metrics.c) renders a realistic snapshot
into $FAIRQ_METRICS_SAMPLE; this parses it with prometheus_client (Debian's
python3-prometheus-client, hence Debian's interpreter) and checks that every
family is documented with its type and labels, and the documented ones are
all there, that per-tenant series carry tenant and plan, that tenants past
the limit are folded into _other, that escaped label values read back
exactly, and that histograms are well-formed.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

from prometheus_client.parser import text_string_to_metric_families

SRC = os.environ.get("FAIRQ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("FAIRQ_BUILD_DIR", os.path.join(SRC, "build"))

# What test_sample in tests/test_metrics.c renders.
SAMPLE_LIMIT = 5            # max_tenant_series
SAMPLE_TENANTS = 8
SAMPLE_PLANS = {"free", "pro", 'we"ird\\plan\nx'}
BUCKETS = ["0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
           "1", "2.5", "5", "10", "30", "60", "120", "300", "600", "1800", "3600", "+Inf"]


def documented():
    """name -> (type, set of labels), from the table in docs/metrics.md."""
    rows = {}
    with open(os.path.join(SRC, "docs", "metrics.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\|\s*`(fairq_\w+)`\s*\|\s*(\w+)\s*\|([^|]*)\|", line)
            if m:
                labels = {l.strip() for l in m.group(3).split(",") if l.strip()}
                rows[m.group(1)] = (m.group(2), labels)
    return rows


def render_sample():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sample.prom")
        env = dict(os.environ, FAIRQ_METRICS_SAMPLE=path)
        run = subprocess.run([os.path.join(BUILD, "test_metrics")], env=env,
                             capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise AssertionError("test_metrics failed:\n" + run.stdout + run.stderr)
        with open(path, encoding="utf-8") as f:
            return f.read()


class MetricsText(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = render_sample()
        cls.families = {f.name: f for f in text_string_to_metric_families(cls.text)}
        cls.doc = documented()

    def family(self, name):
        """The parser names a counter family without its _total."""
        typ = self.doc[name][0]
        return self.families.get(name[:-len("_total")] if typ == "counter" else name)

    def test_documented_families_are_rendered_with_their_types(self):
        self.assertGreater(len(self.doc), 20)
        for name, (typ, _) in self.doc.items():
            fam = self.family(name)
            self.assertIsNotNone(fam, f"{name} is documented but not rendered")
            self.assertEqual(fam.type, typ, name)
            self.assertTrue(fam.documentation, f"{name} has no HELP")

    def test_rendered_families_are_documented(self):
        names = {n[:-len("_total")] if t == "counter" else n for n, (t, _) in self.doc.items()}
        for name in self.families:
            self.assertIn(name, names, f"{name} is rendered but not in docs/metrics.md")

    def test_labels_match_the_documentation(self):
        for name, (_, labels) in self.doc.items():
            for s in self.family(name).samples:
                got = set(s.labels) - ({"le"} if s.name.endswith("_bucket") else set())
                self.assertEqual(got, labels, s)
                if name.startswith("fairq_tenant_"):
                    self.assertIn("tenant", s.labels)
                    self.assertIn("plan", s.labels)

    def test_names_carry_prefix_and_units(self):
        for name, (typ, _) in self.doc.items():
            self.assertTrue(name.startswith("fairq_"))
            self.assertEqual(typ == "counter", name.endswith("_total"), name)

    def test_tenants_past_the_limit_fold_into_other(self):
        tenants = {s.labels["tenant"] for s in self.families["fairq_tenant_queued_runs"].samples}
        self.assertIn("_other", tenants)
        self.assertEqual(len(tenants - {"_other"}), SAMPLE_LIMIT)
        self.assertEqual(self.families["fairq_tenants"].samples[0].value, SAMPLE_TENANTS)
        self.assertEqual(self.families["fairq_tenants_folded"].samples[0].value,
                         SAMPLE_TENANTS - SAMPLE_LIMIT)
        # No two samples share a label set.
        for fam in self.families.values():
            keys = [(s.name, tuple(sorted(s.labels.items()))) for s in fam.samples]
            self.assertEqual(len(keys), len(set(keys)), fam.name)

    def test_escaped_label_values_read_back(self):
        plans = {s.labels["plan"] for s in self.families["fairq_tenant_queued_runs"].samples}
        self.assertEqual(plans, SAMPLE_PLANS)

    def test_histograms_are_cumulative_and_complete(self):
        fam = self.families["fairq_tenant_submit_to_dispatch_seconds"]
        series = {}
        for s in fam.samples:
            key = (s.labels["tenant"], s.labels["plan"])
            series.setdefault(key, {"buckets": []})
            if s.name.endswith("_bucket"):
                series[key]["buckets"].append((s.labels["le"], s.value))
            else:
                series[key][s.name.rsplit("_", 1)[1]] = s.value
        self.assertTrue(series)
        self.assertIn("_other", {k[0] for k in series})
        for key, h in series.items():
            les = [le for le, _ in h["buckets"]]
            self.assertEqual(les, BUCKETS, key)
            counts = [v for _, v in h["buckets"]]
            self.assertEqual(counts, sorted(counts), key)
            self.assertEqual(counts[-1], h["count"], key)
            self.assertGreaterEqual(h["sum"], 0, key)


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
