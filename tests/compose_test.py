#!/usr/bin/python3
"""compose_test.py -- docker-compose.yml and the Dockerfile checked against each other and the repo, without an engine.

scripts/container.sh (make container-test) builds the image and starts the
compose file for real; this checks in a second, at every `make test`, what
`compose up` needs and could get wrong: services and images, the commands and the
flags the binaries really take, the healthchecks behind each depends_on,
mounted paths that exist, one metrics port everywhere, a multi-stage build
that builds what the services run, a non-root user, and runtime packages that
cover every library the binaries link. Uses Debian's python3-yaml.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import unittest
from urllib.parse import urlparse

import yaml

SRC = os.path.abspath(os.environ.get("FAIRQ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..")))
BUILD = os.environ.get("FAIRQ_BUILD_DIR", os.path.join(SRC, "build"))
TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def src(*parts):
    return os.path.join(SRC, *parts)


def dockerfile_stages(path):
    """[(image, name, [(INSTRUCTION, args)])], continuation lines joined."""
    stages, logical, cont = [], [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not cont and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                cont += line[:-1] + " "
                continue
            logical.append(cont + line)
            cont = ""
    for line in logical:
        instr, _, args = line.strip().partition(" ")
        instr, args = instr.upper(), args.strip()
        if instr == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append((words[0], name, []))
        else:
            stages[-1][2].append((instr, args))
    return stages


def exec_form(args):
    """The JSON array of an exec-form instruction, after its --options."""
    while args.startswith("--"):
        args = args.split(None, 1)[1]
    if args.startswith("CMD "):
        args = args[4:]
    return json.loads(args)


def flag(argv, name):
    """The value after name in argv, or None."""
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def port_of(hostport):
    return int(str(hostport).rsplit(":", 1)[1])


def interpolated(value):
    """value with each ${VAR:-default} as its default, as compose reads it with VAR unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))


def seconds(duration):
    """A compose duration ("15s", "1m30s") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([hms])", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


class Container(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(src("docker-compose.yml"), encoding="utf-8") as f:
            cls.compose = yaml.safe_load(f)
        cls.services = cls.compose["services"]
        cls.stages = dockerfile_stages(src("Dockerfile"))
        cls.final = cls.stages[-1][2]
        with open(src("config", "fairq.yaml"), encoding="utf-8") as f:
            cls.config = yaml.safe_load(f)

    # Binaries other engineers are writing while this test is: checks that
    # need them are skipped, naming them, until their sources exist.
    PENDING = ("fairq-proxy", "fairq-producer", "fairq-worker")

    def pending(self):
        return [b for b in self.PENDING if not os.path.exists(src("cmd", b + ".c"))]

    def pending_reason(self):
        return "not written yet: " + ", ".join(f"cmd/{b}.c" for b in self.pending())

    def instr(self, name, stage=None):
        return [a for i, a in (stage if stage is not None else self.final) if i == name]

    def built_here(self, svc):
        """Services that run the image of this Dockerfile."""
        b = svc.get("build")
        if b is None:
            return False
        ctx = b if isinstance(b, str) else b.get("context", ".")
        df = "Dockerfile" if isinstance(b, str) else b.get("dockerfile", "Dockerfile")
        return os.path.samefile(os.path.join(SRC, ctx, df), src("Dockerfile"))

    def entrypoint(self, svc):
        ep = svc.get("entrypoint")
        if ep is not None:
            return ep if isinstance(ep, list) else shlex.split(ep)
        return exec_form(self.instr("ENTRYPOINT")[-1])

    def command(self, svc):
        c = svc.get("command")
        return c if isinstance(c, list) else shlex.split(c or "")

    def metrics_port(self):
        return port_of(self.config["http"]["listen"])

    # ---- the Dockerfile ----

    def test_multi_stage_from_bookworm_slim(self):
        self.assertGreaterEqual(len(self.stages), 2)
        for image, _, _ in self.stages:
            self.assertEqual(image, "debian:bookworm-slim")
        build_name = self.stages[0][1]
        self.assertTrue(build_name)
        copies = [a for a in self.instr("COPY") if a.startswith("--from=")]
        self.assertTrue(copies, "the final stage copies nothing from the build stage")
        for c in copies:
            self.assertEqual(c.split()[0], "--from=" + build_name)

    def test_builds_with_the_projects_script_and_cmake(self):
        build = self.stages[0][2]
        runs = " ".join(self.instr("RUN", build))
        self.assertIn("scripts/install-deps.sh", runs)
        self.assertTrue(os.access(src("scripts", "install-deps.sh"), os.X_OK))
        self.assertRegex(runs, r"cmake -S \. -B \S+")
        self.assertIn("cmake --build", runs)
        builddir = re.search(r"-B (\S+)", runs).group(1)
        workdir = self.instr("WORKDIR", build)[-1]
        targets = re.search(r"--target ([\w\- ]+)", runs).group(1).split()
        # Every binary copied out is built, from a cmd/ source, where the build put it.
        for c in [a for a in self.instr("COPY") if a.startswith("--from=")]:
            paths = c.split()[1:-1]
            for p in paths:
                self.assertEqual(os.path.dirname(p), os.path.join(workdir, builddir), p)
                self.assertIn(os.path.basename(p), targets)
        for t in targets:
            if t not in self.pending():
                self.assertTrue(os.path.exists(src("cmd", t + ".c")), f"cmd/{t}.c does not exist")
        if self.pending():
            self.skipTest(self.pending_reason())

    def test_runs_as_a_non_root_user_it_creates(self):
        user = self.instr("USER")[-1].split(":")[0]
        self.assertNotIn(user, ("root", "0"))
        self.assertRegex(" ".join(self.instr("RUN")), r"useradd\b.*\b" + re.escape(user) + r"\b")

    def test_entrypoint_healthcheck_and_port(self):
        self.assertEqual(exec_form(self.instr("ENTRYPOINT")[-1]), ["fairq-proxy"])
        cmd = exec_form(self.instr("CMD")[-1])
        self.assertEqual(cmd[0], "-c")
        # The default config is the repo's, where CMD looks for it.
        self.assertIn(f"config/fairq.yaml {cmd[1]}", self.instr("COPY"))
        hc = exec_form(self.instr("HEALTHCHECK")[-1])
        self.assertEqual(hc[:2], ["fairq-proxy", "--health"])
        url = urlparse(hc[2])
        self.assertEqual((url.scheme, url.hostname, url.path), ("http", "127.0.0.1", "/healthz"))
        self.assertEqual(url.port, self.metrics_port())
        self.assertEqual([int(p.split("/")[0]) for p in self.instr("EXPOSE")], [self.metrics_port()])

    def test_context_leaves_out_host_builds(self):
        with open(src(".dockerignore"), encoding="utf-8") as f:
            patterns = {l.strip() for l in f if l.strip() and not l.startswith("#")}
        for p in (".git", "build", "build-*"):
            self.assertIn(p, patterns)

    # ---- docker-compose.yml ----

    def test_nats_service(self):
        nats = self.services["nats"]
        self.assertRegex(interpolated(nats["image"]), r"^nats:[\w.\-]*alpine")
        cmd = self.command(nats)
        self.assertIn("-js", cmd)
        self.assertEqual(flag(cmd, "-m"), "8222")
        store = flag(cmd, "-sd")
        mounts = dict(v.split(":")[1::-1] for v in nats["volumes"])
        self.assertIn(store, mounts, "the JetStream store is not on a volume")
        self.assertIn(mounts[store], self.compose.get("volumes", {}))
        test = nats["healthcheck"]["test"]
        self.assertEqual(test[0], "CMD")
        self.assertEqual(test[1], "wget")
        self.assertEqual(urlparse(test[-1]).port, 8222)

    def test_nats_runs_the_shipped_config_and_clients_their_roles(self):
        # The one server config of the repo, mounted where -c reads it, so
        # that compose, make run and tests/it_lockdown.c check the same file.
        nats = self.services["nats"]
        conf = flag(self.command(nats), "-c")
        mounts = {}
        for v in nats["volumes"]:
            host, target = v.split(":")[:2]
            mounts[target] = os.path.normpath(host)
        self.assertEqual(mounts.get(conf), os.path.join("config", "nats-server.conf"))
        with open(src("config", "nats-server.conf"), encoding="utf-8") as f:
            text = f.read()
        users = dict(re.findall(r'user:\s*(\S+)\s*\n\s*password:\s*"([^"]+)"', text))
        self.assertIn(self.config["nats"]["user"], users)
        self.assertEqual(users[self.config["nats"]["user"]], self.config["nats"]["password"])
        self.assertIn(f'"_INBOX_{self.config["nats"]["user"]}.>"', text)
        self.assertEqual(self.config["nats"]["inbox_prefix"], "_INBOX_" + self.config["nats"]["user"])
        # Every example client connects as a user of the config, with that
        # user's inbox; a producer as its own tenant.
        for name, svc in self.services.items():
            if not self.built_here(svc) or self.entrypoint(svc) == ["fairq-proxy"]:
                continue
            cmd = self.command(svc)
            url = urlparse(flag(cmd, "--nats"))
            self.assertIn(url.username, users, name)
            self.assertEqual(url.password, users[url.username], name)
            self.assertEqual(flag(cmd, "--inbox-prefix"), "_INBOX_" + url.username, name)
            if self.entrypoint(svc) == ["fairq-producer"]:
                self.assertEqual(flag(cmd, "--tenant"), url.username, name)
                self.assertIn(f'"fair.submit.{url.username}"', text)

    def test_fairq_service(self):
        fq = self.services["fairq"]
        self.assertTrue(self.built_here(fq))
        self.assertEqual(self.entrypoint(fq), ["fairq-proxy"])
        self.assertEqual(fq["depends_on"]["nats"]["condition"], "service_healthy")
        cfg = flag(self.command(fq), "-c")
        mounts = {}
        for v in fq["volumes"]:
            host, target = v.split(":")[:2]
            self.assertTrue(os.path.exists(os.path.join(SRC, host)), f"{host} is not in the repo")
            mounts[target] = os.path.normpath(host)
        self.assertEqual(mounts.get(cfg), "config/fairq.yaml")
        env = fq["environment"]
        url = urlparse(env["FAIRQ_NATS_URL"])
        self.assertEqual((url.scheme, url.hostname, url.port), ("nats", "nats", 4222))
        # Reachable from outside the container, on the one metrics port.
        listen = env.get("FAIRQ_HTTP_LISTEN", self.config["http"]["listen"])
        self.assertEqual(listen.rsplit(":", 1)[0], "0.0.0.0")
        self.assertEqual(port_of(listen), self.metrics_port())
        self.assertIn(f"{self.metrics_port()}:{self.metrics_port()}", [interpolated(p) for p in fq["ports"]])

    def test_environment_is_read_by_the_sources(self):
        if "fairq-proxy" in self.pending():
            self.skipTest(self.pending_reason())
        sources = ""
        for d in ("cmd", "lib"):
            for name in sorted(os.listdir(src(d))):
                if name.endswith((".c", ".h")):
                    with open(src(d, name), encoding="utf-8", errors="replace") as f:
                        sources += f.read()
        for svc in self.services.values():
            for var in (svc.get("environment") or {}):
                self.assertTrue(f'"{var}"' in sources, f"{var} is set but no source reads it")

    def test_examples_run_from_the_image(self):
        producers = [n for n, s in self.services.items() if self.built_here(s)
                     and self.entrypoint(s) == ["fairq-producer"]]
        workers = [n for n, s in self.services.items() if self.built_here(s)
                   and self.entrypoint(s) == ["fairq-worker"]]
        self.assertGreaterEqual(len(producers), 2, "a flooding tenant and a small one")
        self.assertTrue(workers)
        counts = []
        for name in producers + workers:
            svc = self.services[name]
            cmd = self.command(svc)
            url = urlparse(flag(cmd, "--nats"))
            self.assertEqual((url.hostname, url.port), ("nats", 4222), name)
            self.assertEqual(svc["depends_on"]["fairq"]["condition"], "service_healthy", name)
            if name in producers:
                self.assertRegex(flag(cmd, "--tenant"), TENANT)
                counts.append(int(flag(cmd, "--count")))
        self.assertGreater(max(counts), 10 * min(counts), "no tenant floods the others")

    def test_every_healthy_dependency_has_a_healthcheck(self):
        has_image_check = bool(self.instr("HEALTHCHECK"))
        for name, svc in self.services.items():
            for dep, cond in (svc.get("depends_on") or {}).items():
                if cond.get("condition") != "service_healthy":
                    continue
                target = self.services[dep]
                hc = target.get("healthcheck")
                if hc is not None:
                    self.assertFalse(hc.get("disable"), f"{name} waits on {dep}, whose check is off")
                else:
                    self.assertTrue(self.built_here(target) and has_image_check, dep)

    def test_image_healthcheck_is_off_where_no_proxy_runs(self):
        # The image's check probes the proxy's port: a producer or worker
        # container would be marked unhealthy for ever.
        for name, svc in self.services.items():
            if self.built_here(svc) and self.entrypoint(svc) != ["fairq-proxy"]:
                self.assertTrue((svc.get("healthcheck") or {}).get("disable"), name)

    def test_every_image_name_is_built_or_official(self):
        for name, svc in self.services.items():
            if not self.built_here(svc):
                self.assertNotIn("build", svc, name)
                self.assertTrue(interpolated(svc["image"]).startswith("nats:"), name)

    def test_runs_with_the_packaged_compose_tools(self):
        # docker-compose 1.29.2 (Debian 12) refuses a top-level name.
        self.assertNotIn("name", self.compose)
        # podman-compose 1.0.3 waits on no depends_on condition: whatever
        # depends on another service is restarted until that one serves.
        for name, svc in self.services.items():
            if svc.get("depends_on"):
                self.assertIn(svc.get("restart"), ("on-failure", "unless-stopped", "always"), name)

    def test_services_run_hardened(self):
        # The proxy's stop budget (docs/protocol.md, section 8) fits in the grace.
        with open(src("docs", "protocol.md"), encoding="utf-8") as f:
            budget = int(re.search(r"exits 0,\s+within (\d+) s of\s+the signal", f.read()).group(1))
        for name, svc in self.services.items():
            self.assertIs(svc.get("read_only"), True, name)
            self.assertEqual(svc.get("cap_drop"), ["ALL"], name)
            self.assertIn("no-new-privileges:true", svc.get("security_opt", []), name)
            self.assertRegex(str(svc.get("mem_limit")), r"^\d+[mg]$", name)
            self.assertGreater(seconds(svc.get("stop_grace_period", "10s")), budget, name)

    def test_bookworm_check_shares_the_build_stages_install(self):
        # scripts/container.sh's bare-bookworm check reuses the image's cached
        # install only while their first steps are the same, word for word.
        check = dockerfile_stages(src("scripts", "container", "bookworm.Dockerfile"))
        self.assertEqual(check[0][0], self.stages[0][0])
        self.assertEqual(check[0][2][:3], self.stages[0][2][:3])
        self.assertIn(("COPY", ". ."), check[0][2])
        runs = " ".join(a for i, a in check[0][2] if i == "RUN")
        self.assertIn("ctest --test-dir build --output-on-failure -L unit", runs)
        self.assertNotIn("--target", runs)

    # ---- the binaries, where they are built ----

    def binary(self, name):
        path = os.path.join(BUILD, name)
        return path if os.access(path, os.X_OK) else None

    def test_flags_exist_in_the_binaries(self):
        checked = 0
        for name, svc in self.services.items():
            if not self.built_here(svc):
                continue
            exe = self.binary(self.entrypoint(svc)[0])
            if not exe:
                continue
            out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
            text = out.stdout + out.stderr
            for word in self.command(svc):
                if word.startswith("-"):
                    self.assertIn(word, text, f"{name}: {exe} --help does not mention {word}")
            checked += 1
        exe = self.binary("fairq-proxy")
        if exe:
            out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
            self.assertIn("--health", out.stdout + out.stderr)
        if checked == 0:
            self.skipTest(f"no binary built in {BUILD}")

    def test_runtime_packages_cover_linked_libraries(self):
        if not shutil.which("ldd") or not shutil.which("dpkg") or not shutil.which("apt-cache"):
            self.skipTest("needs ldd, dpkg and apt-cache")
        runs = " ".join(self.instr("RUN"))
        pkgs = re.search(r"apt-get install -y --no-install-recommends ([\w.+\- ]+?)(?: &&|$)", runs).group(1).split()
        deps = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                               "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + pkgs,
                              capture_output=True, text=True)
        if deps.returncode != 0:
            self.skipTest("apt-cache has no package lists here")
        closure = {l.strip() for l in deps.stdout.splitlines() if l and not l[0].isspace()}
        for p in pkgs:
            self.assertIn(p, closure, f"{p} is not a Debian package here")
        exes = [self.binary(b) for b in ("fairq-proxy", "fairq-producer", "fairq-worker")]
        exes = [e for e in exes if e]
        if not exes:
            self.skipTest(f"no binary built in {BUILD}")
        for exe in exes:
            for line in subprocess.run(["ldd", exe], capture_output=True, text=True).stdout.splitlines():
                m = re.search(r"=> (/\S+)", line)
                if not m:
                    continue
                lib = m.group(1)
                owner = None
                for cand in (lib, os.path.realpath(lib), "/usr" + lib, "/usr" + os.path.realpath(lib)):
                    q = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True)
                    if q.returncode == 0:
                        owner = q.stdout.split(":")[0]
                        break
                self.assertIsNotNone(owner, f"{lib} belongs to no package")
                self.assertIn(owner, closure, f"{exe} links {lib} of {owner}, which the image does not install")


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
