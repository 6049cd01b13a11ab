#!/usr/bin/python3
"""dashboards_test.py -- the Grafana dashboard and the Prometheus alerting rules in deploy/, checked with promtool and against a live proxy.

- deploy/prometheus/alerts.yml passes `promtool check rules`, and
  `promtool test rules deploy/prometheus/alerts_test.yml` passes, whose cases
  fire every alert at least once and spare it at least once (checked here);
- deploy/grafana/fairq.json is a Grafana 10.4 dashboard (schemaVersion 39)
  with a Prometheus datasource variable, job, proxy and tenant variables, and
  panels for what it must show; each PromQL expression of it, its template
  variables substituted, is parsed by promtool (as a recording rule, since
  promtool 2.42 has no command that checks a bare expression);
- every metric the dashboard and the rules name is served by a real
  fairq-proxy on a real nats-server, with a sample once the test has made
  the events that produce them (runs of two tenants queued behind a window
  of one, some completed at three times their estimate, one refused), and
  every label they match or group by is a label of those series or one
  Prometheus adds;
- a real Prometheus scraping that proxy and a standby (every second, with
  the rules)
  answers every query of the dashboard without error and with a result
  (promtool parses, only an evaluation finds a many-to-many match), the
  weight shares come out as the plans' weights say, every rule evaluates
  without error, FairqEstimateErrorDrifting is pending for the tenant that
  spends three times its estimates and no other alert is (the standby is
  not "not ready"), and the leader and readiness panels tell the two apart.

promtool and prometheus are Debian's prometheus package (2.42); the parser
is Debian's python3-prometheus-client.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml
from prometheus_client.parser import text_string_to_metric_families

SRC = os.path.abspath(os.environ.get("FAIRQ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..")))
BUILD = os.environ.get("FAIRQ_BUILD_DIR", os.path.join(SRC, "build"))
RULES = os.path.join(SRC, "deploy", "prometheus", "alerts.yml")
RULES_TEST = os.path.join(SRC, "deploy", "prometheus", "alerts_test.yml")
DASHBOARD = os.path.join(SRC, "deploy", "grafana", "fairq.json")

# What Grafana puts in place of its variables before it sends a query.
GRAFANA_VARS = {"job": "fairq", "instance": ".*", "tenant": ".*",
                "__rate_interval": "1m", "__interval": "30s", "__range": "1h"}
# Labels Prometheus attaches to every scraped series, and the histogram's.
SCRAPE_LABELS = {"job", "instance", "le"}
# What the dashboard must show (issue 15): one metric at least for each.
MUST_SHOW = {
    "queue-age skew": ["fairq_queue_age_skew_seconds"],
    "each tenant's backlog": ["fairq_tenant_queued_runs", "fairq_tenant_queued_tokens"],
    "each tenant's wait": ["fairq_tenant_submit_to_dispatch_seconds_bucket",
                           "fairq_tenant_oldest_queued_age_seconds"],
    "token shares against weights": ["fairq_tenant_charged_tokens_total", "fairq_tenant_weight"],
    "estimate error": ["fairq_tenant_estimate_error_ratio"],
    "refusals by reason": ["fairq_rejected_runs_total"],
    "window use": ["fairq_in_flight_runs", "fairq_window_capacity_runs"],
    "the leader and its lease": ["fairq_dispatch_lease_held", "fairq_lease_age_seconds", "fairq_ready"],
}
METRIC = re.compile(r"\bfairq_[a-zA-Z0-9_]+")
# Label names in matchers (name="..", name=~"..") and in by/without/on/ignoring lists.
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def promtool(*args):
    exe = shutil.which("promtool")
    if not exe:
        raise AssertionError("promtool not found: scripts/install-deps.sh installs Debian's prometheus")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def grafana_substitute(expr):
    """The expression as Grafana sends it: $var and ${var} replaced."""
    def repl(m):
        name = m.group(1) or m.group(2)
        if name not in GRAFANA_VARS:
            raise AssertionError(f"unknown variable ${name} in {expr}")
        return GRAFANA_VARS[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def panels_of(dash):
    """Every panel, those inside collapsed rows too."""
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_exprs(dash):
    """(where, PromQL) of every target and of every query variable's selector."""
    out = []
    for p in panels_of(dash):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
        if not m:
            raise AssertionError(f"variable {v['name']}: not label_values(selector, label): {q}")
        out.append((f"variable {v['name']}", m.group(1)))
    return out


def rule_exprs(rules):
    return [(f"alert {r['alert']}", r["expr"]) for g in rules["groups"] for r in g["rules"]]


def labels_used(expr):
    labels = set(MATCHER_LABEL.findall(expr))
    for group in GROUPING.findall(expr):
        labels.update(l.strip() for l in group.split(",") if l.strip())
    return labels


def check_exprs_parse(exprs, tmp):
    """promtool's verdict on exprs, each as a recording rule of its own."""
    rules = {"groups": [{"name": "parse", "rules": [
        {"record": f"fairq_check:expr{i}", "expr": grafana_substitute(e)} for i, (_, e) in enumerate(exprs)]}]}
    path = os.path.join(tmp, "exprs.yml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(rules, f)
    return promtool("check", "rules", path)


class Rules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(RULES, encoding="utf-8") as f:
            cls.rules = yaml.safe_load(f)
        with open(RULES_TEST, encoding="utf-8") as f:
            cls.cases = yaml.safe_load(f)
        cls.alerts = [r["alert"] for g in cls.rules["groups"] for r in g["rules"]]

    def test_promtool_check_rules(self):
        run = promtool("check", "rules", RULES)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"SUCCESS: {len(self.alerts)} rules found", run.stdout)

    def test_promtool_test_rules(self):
        run = promtool("test", "rules", RULES_TEST)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("SUCCESS", run.stdout)

    def test_the_issue_asks_for_these_alerts(self):
        for name in ["FairqQueueAgeSkewHigh", "FairqEstimateErrorDrifting", "FairqRefusalsRising",
                     "FairqNotDispatching", "FairqProxyNotReady"]:
            self.assertIn(name, self.alerts)

    def test_each_alert_is_fired_and_spared_by_a_case(self):
        fired, spared = set(), set()
        for case in self.cases["tests"]:
            for t in case.get("alert_rule_test", []):
                self.assertIn(t["alertname"], self.alerts, "a case for an alert that does not exist")
                (fired if t.get("exp_alerts") else spared).add(t["alertname"])
        for name in self.alerts:
            self.assertIn(name, fired, f"no case fires {name}")
            self.assertIn(name, spared, f"no case where {name} stays silent")

    def test_every_alert_says_how_bad_and_what(self):
        for g in self.rules["groups"]:
            for r in g["rules"]:
                self.assertIn(r["labels"]["severity"], ("warning", "critical"), r["alert"])
                self.assertTrue(r["annotations"]["summary"], r["alert"])
                self.assertTrue(r["annotations"]["description"], r["alert"])


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD, encoding="utf-8") as f:
            cls.dash = json.load(f)
        cls.exprs = dashboard_exprs(cls.dash)

    def test_targets_grafana_10_4(self):
        self.assertEqual(self.dash["schemaVersion"], 39)
        grafana = [r for r in self.dash["__requires"] if r["id"] == "grafana"]
        self.assertEqual(len(grafana), 1)
        self.assertTrue(grafana[0]["version"].startswith("10.4."))
        self.assertIsNone(self.dash["id"])   # importable: Grafana gives it one
        self.assertTrue(self.dash["uid"])

    def test_variables(self):
        var = {v["name"]: v for v in self.dash["templating"]["list"]}
        self.assertEqual(var["datasource"]["type"], "datasource")
        self.assertEqual(var["datasource"]["query"], "prometheus")
        for name in ("job", "instance", "tenant"):
            self.assertEqual(var[name]["type"], "query", name)
            self.assertEqual(var[name]["datasource"]["uid"], "${datasource}", name)
        self.assertTrue(var["instance"]["includeAll"] and var["tenant"]["includeAll"])

    def test_panels_query_the_datasource_variable_and_fit_the_grid(self):
        taken = set()
        ids = set()
        for p in panels_of(self.dash):
            self.assertNotIn(p["id"], ids, p["title"])
            ids.add(p["id"])
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            self.assertFalse(cells & taken, f"{p['title']} overlaps another panel")
            taken |= cells
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            self.assertTrue(p["targets"], p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])

    def test_shows_what_the_issue_asks_for(self):
        named = set()
        for _, e in self.exprs:
            named.update(METRIC.findall(e))
        for what, metrics in MUST_SHOW.items():
            for m in metrics:
                self.assertIn(m, named, f"the dashboard shows no {what} ({m})")

    def test_every_expression_parses(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = check_exprs_parse(self.exprs, tmp)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn(f"SUCCESS: {len(self.exprs)} rules found", run.stdout)
            # The check has teeth: one broken expression fails it.
            bad = self.exprs + [("broken", 'sum by (tenant (rate(fairq_tenant_queued_runs[$__rate_interval]))')]
            run = check_exprs_parse(bad, tmp)
            self.assertNotEqual(run.returncode, 0, "promtool accepted a broken expression")


class LiveMetrics(unittest.TestCase):
    """The dashboard and the rules on a running proxy, scraped by a real Prometheus."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fairq-dash-")
        cls.proxy = cls.standby = cls.prom = None
        try:
            cls.url = subprocess.run([os.path.join(SRC, "scripts", "nats-up.sh"), cls.tmp],
                                     capture_output=True, text=True, check=True, timeout=30).stdout.strip()
            cls.start_proxy()
            cls.start_prometheus()
            cls.make_events()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for p in (cls.prom, cls.standby, cls.proxy):
            if p:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        subprocess.run([os.path.join(SRC, "scripts", "nats-down.sh"), cls.tmp], check=False)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def free_port(cls):
        return subprocess.run([os.path.join(SRC, "scripts", "free-port.sh")],
                              capture_output=True, text=True, check=True).stdout.strip()

    @classmethod
    def start_proxy(cls):
        """A leader and a standby on the shipped config with a window of one
        run, so that runs stay queued behind the one in flight for the panels
        that need a backlog."""
        with open(os.path.join(SRC, "config", "fairq.yaml"), encoding="utf-8") as f:
            conf = f.read()
        window = re.compile(r"^  max_in_flight: 64\b", re.M)
        if not window.search(conf):
            raise AssertionError("config/fairq.yaml: window.max_in_flight: 64 not found")
        path = os.path.join(cls.tmp, "fairq.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(window.sub("  max_in_flight: 1", conf))
        cls.proxy_port, cls.standby_port = cls.free_port(), cls.free_port()
        cls.http = f"http://127.0.0.1:{cls.proxy_port}"

        def spawn(port, name):
            with open(os.path.join(cls.tmp, name + ".log"), "w") as log:
                return subprocess.Popen(
                    [os.path.join(BUILD, "fairq-proxy"), "-c", path, "--nats", cls.url],
                    env=dict(os.environ, FAIRQ_HTTP_LISTEN=f"127.0.0.1:{port}"),
                    stdout=log, stderr=subprocess.STDOUT)
        cls.proxy = spawn(cls.proxy_port, "proxy")
        cls.wait_for(lambda: cls.get(cls.http + "/readyz") == (200, "ready\n"), "the proxy to lead and be ready")
        cls.standby = spawn(cls.standby_port, "standby")
        cls.wait_for(lambda: cls.get(f"http://127.0.0.1:{cls.standby_port}/readyz")[1].startswith("standby"),
                     "the second proxy to stand by")

    @classmethod
    def start_prometheus(cls):
        """Debian's Prometheus scraping the proxy every second as job fairq,
        with the alerting rules, evaluated every second."""
        exe = shutil.which("prometheus")
        if not exe:
            raise AssertionError("prometheus not found: scripts/install-deps.sh installs Debian's prometheus")
        conf = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [RULES],
                "scrape_configs": [{"job_name": "fairq",
                                    "static_configs": [{"targets": [f"127.0.0.1:{cls.proxy_port}",
                                                                    f"127.0.0.1:{cls.standby_port}"]}]}]}
        path = os.path.join(cls.tmp, "prometheus.yml")
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(conf, f)
        port = cls.free_port()
        cls.prom_url = f"http://127.0.0.1:{port}"
        log = open(os.path.join(cls.tmp, "prometheus.log"), "w")
        cls.prom = subprocess.Popen(
            [exe, f"--config.file={path}", f"--storage.tsdb.path={cls.tmp}/tsdb",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        cls.wait_for(lambda: len(cls.query("fairq_build_info")) == 2, "Prometheus to scrape both proxies")

    @classmethod
    def get(cls, url):
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")
        except OSError:
            return 0, ""

    @classmethod
    def api(cls, path, **params):
        """Prometheus's answer to an API request: (status, data or error)."""
        status, body = cls.get(cls.prom_url + "/api/v1/" + path + "?" + urllib.parse.urlencode(params))
        if not body:
            return "unreachable", None
        try:
            j = json.loads(body)
        except ValueError:
            # Until it is ready Prometheus answers its API in plain text
            # (503, "Service Unavailable"): no answer yet.
            return "unreachable", None
        return j["status"], j.get("data") if j["status"] == "success" else j.get("error")

    @classmethod
    def query(cls, expr):
        """An instant query's result, [] if it failed."""
        status, data = cls.api("query", query=expr)
        return data["result"] if status == "success" else []

    @classmethod
    def wait_for(cls, cond, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in (("proxy", cls.proxy), ("standby", cls.standby), ("prometheus", cls.prom)):
                if p and p.poll() is not None:
                    log = os.path.join(cls.tmp, name + ".log")
                    raise AssertionError(f"{name} exited {p.returncode} while waiting for {what}: "
                                         + open(log).read()[-2000:])
            if cond():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    @classmethod
    def client(cls, prog, *args):
        run = subprocess.run([os.path.join(BUILD, prog), "--nats", cls.url, *args],
                             capture_output=True, text=True, timeout=30)
        if run.returncode != 0:
            raise AssertionError(f"{prog} {' '.join(args)} failed: {run.stdout}{run.stderr}")

    @classmethod
    def work(cls, n):
        """A worker completes n runs at three times their estimate, and
        Prometheus scrapes the completions."""
        cls.client("fairq-worker", "--count", str(n), "--tokens-per-sec", "0", "--actual-factor", "3",
                   "--deliver", "all")
        cls.done += n
        cls.wait_for(lambda: cls.query(f'fairq_completions_total{{outcome="held"}} == {cls.done}'),
                     f"Prometheus to see {cls.done} completions")

    @classmethod
    def make_events(cls):
        """Runs of two tenants queued behind a window of one, four of them
        completed at three times their estimate in two rounds (so that
        Prometheus sees the counters move), and a run refused (its estimate
        over scheduler.max_est_tokens): after them every family the
        dashboard and the rules use has samples, and two tenants have queued
        runs."""
        cls.done = 0
        cls.client("fairq-producer", "--tenant", "acme", "--est", "100", "--count", "6")
        cls.client("fairq-producer", "--tenant", "globex", "--est", "100", "--count", "3")
        cls.client("fairq-producer", "--tenant", "acme", "--est", "2000000", "--count", "1")
        cls.work(2)
        cls.work(2)
        cls.wait_for(lambda: cls.query("fairq_rejected_runs_total") and cls.query(
            'count(fairq_tenant_queued_runs{job="fairq"} > 0) == 2'), "Prometheus to see the refusal and the backlog")
        cls.text = cls.get(cls.http + "/metrics")[1]

    def setUp(self):
        with open(DASHBOARD, encoding="utf-8") as f:
            self.dash = json.load(f)
        with open(RULES, encoding="utf-8") as f:
            rules = yaml.safe_load(f)
        self.rules = rule_exprs(rules)
        self.exprs = dashboard_exprs(self.dash) + self.rules
        self.types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", self.text, re.M))
        self.samples = {}
        for fam in text_string_to_metric_families(self.text):
            for s in fam.samples:
                self.samples.setdefault(s.name, set()).update(s.labels)

    def family(self, name):
        """The family a sample name belongs to: a histogram's _bucket, _sum and _count are its own."""
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[:-len(suffix)]
            if name.endswith(suffix) and self.types.get(base) == "histogram":
                return base
        return name

    def test_every_metric_named_is_served_with_samples(self):
        named = {}
        for where, e in self.exprs:
            for m in METRIC.findall(e):
                named.setdefault(m, where)
        self.assertGreater(len(named), 30)
        for m, where in sorted(named.items()):
            fam = self.family(m)
            self.assertTrue(fam in self.types, f"{where} names {m}, which /metrics does not serve")
            if m == fam and self.types[fam] == "histogram":
                self.fail(f"{where} names the histogram {m} without _bucket, _sum or _count")
            self.assertTrue(m in self.samples, f"{where} names {m}, which has no sample after the events")

    def test_every_label_used_is_a_label_of_the_series(self):
        known = set(SCRAPE_LABELS)
        for labels in self.samples.values():
            known |= labels
        for where, e in self.exprs:
            for label in labels_used(e):
                self.assertIn(label, known, f"{where} uses the label {label}, which no series has")
            # A matcher right after a metric's name: a label of that metric.
            for m, body in re.findall(r"\b(fairq_[a-zA-Z0-9_]+)\{([^}]*)\}", e):
                for label in MATCHER_LABEL.findall(body):
                    if label not in SCRAPE_LABELS:
                        self.assertIn(label, self.samples.get(m, set()), f"{where}: {m} has no label {label}")

    def test_every_dashboard_query_answers_in_prometheus(self):
        """Each query as Grafana sends it, evaluated by Prometheus without
        error, and with a result but for the token window's use: the config
        sets no token limit (its capacity is +Inf, left out)."""
        expect_empty = {("Window use", "B")}
        for where, e in dashboard_exprs(self.dash):
            status, data = self.api("query", query=grafana_substitute(e))
            self.assertEqual(status, "success", f"{where}: {data}")
            key = next(((p["title"], t["refId"]) for p in panels_of(self.dash)
                        for t in p.get("targets", []) if t["expr"] == e), None)
            if key in expect_empty:
                self.assertEqual(data["result"], [], where)
            else:
                self.assertTrue(data["result"], f"{where}: no result from {grafana_substitute(e)}")

    def test_token_shares_follow_the_weights(self):
        """The share panels on live data: the weight shares of the two
        backlogged tenants are 10/13 and 3/13 (enterprise and pro)."""
        panel = next(p for p in panels_of(self.dash) if p["title"] == "Weight share of the backlogged tenants")
        got = {r["metric"]["tenant"]: float(r["value"][1])
               for r in self.query(grafana_substitute(panel["targets"][0]["expr"]))}
        self.assertAlmostEqual(got.pop("acme"), 10 / 13)
        self.assertAlmostEqual(got.pop("globex"), 3 / 13)
        self.assertEqual(got, {})

    def test_window_use_is_one_run_of_one(self):
        """The window panels on live data, a standby beside: one run in
        flight of a window of one is a use of 1, the token window (no limit)
        has no value."""
        panel = next(p for p in panels_of(self.dash) if p["title"] == "Window use" and p["type"] == "timeseries")
        runs, tokens = (self.query(grafana_substitute(t["expr"])) for t in panel["targets"])
        self.assertEqual([float(r["value"][1]) for r in runs], [1.0])
        self.assertEqual(tokens, [])

    def test_the_leader_and_readiness_panels(self):
        """The Leader stat names the leader alone, and the readiness panel
        says ready for it and standby for the other."""
        leader = f"127.0.0.1:{self.proxy_port}"
        standby = f"127.0.0.1:{self.standby_port}"
        exprs = {p["title"]: grafana_substitute(p["targets"][0]["expr"]) for p in panels_of(self.dash)
                 if p.get("targets")}
        self.assertEqual([r["metric"]["instance"] for r in self.query(exprs["Leader"])], [leader])
        got = sorted((r["metric"]["instance"], r["metric"]["reason"]) for r in self.query(exprs["Readiness per proxy"]))
        self.assertEqual(got, sorted([(leader, "ready"), (standby, "standby")]))

    def test_rules_evaluate_and_the_estimate_alert_is_pending(self):
        """Every rule evaluates without error on live series, and acme, which
        spends three times its estimates, has FairqEstimateErrorDrifting
        pending (it fires after 15 minutes)."""
        def evaluated():
            status, data = self.api("rules")
            rules = [r for g in data["groups"] for r in g["rules"]] if status == "success" else []
            return rules and all(r["health"] != "unknown" for r in rules) and rules
        self.wait_for(evaluated, "Prometheus to evaluate every rule")
        rules = evaluated()
        self.assertEqual(len(rules), len(self.rules))
        for r in rules:
            self.assertEqual(r["health"], "ok", f"{r['name']}: {r.get('lastError')}")

        def pending():
            status, data = self.api("alerts")
            return [a for a in data["alerts"] if a["labels"]["alertname"] == "FairqEstimateErrorDrifting"]
        self.wait_for(pending, "FairqEstimateErrorDrifting to be pending")
        alerts = pending()
        self.assertEqual([(a["labels"]["tenant"], a["state"]) for a in alerts], [("acme", "pending")])
        self.assertEqual(float(alerts[0]["value"]), 3.0)
        # And nothing else: not the standby (not ready for nothing), nor the job.
        self.assertEqual([a["labels"]["alertname"] for a in self.api("alerts")[1]["alerts"]],
                         ["FairqEstimateErrorDrifting"])


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
