#!/usr/bin/python3
"""auth_test.py -- fairq-proxy connects over TLS with verification both ways and authenticates by password or nkey, through its config keys, against a real nats-server.

The test makes its own CA, server and client certificates with openssl
(3.0), an expired server certificate (`openssl ca` with dates in the past)
and a second CA that signed nothing of the server's; a user nkey with
openssl too (tests/support/nkey.py). Each case starts fairq-proxy on a
config that says nats.tls.*, nats.user/password or nats.nkey/nkey_seed with
a plain nats:// URL (no credentials in it), and reads its log: "fairq-proxy
running" when it is let in, else the reason it is refused, which must say
why in words an operator can act on.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

SRC = os.path.abspath(os.environ.get("FAIRQ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..")))
BUILD = os.environ.get("FAIRQ_BUILD_DIR", os.path.join(SRC, "build"))
sys.path.insert(0, os.path.join(SRC, "tests", "support"))
import nkey  # noqa: E402

PASSWORD = "a-test-password"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
            cwd=d)


def make_cert(d, name, ca, san):
    """A key and a certificate for name signed by ca, valid from now for 2 days."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={san}\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


def make_expired_cert(d, name, ca, san):
    """The same, valid only for a day in 2020: `openssl x509` cannot date a
    certificate in the past, `openssl ca` can."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca = c\n[c]\ndir = .\ndatabase = index.txt\nnew_certs_dir = .\n"
                "serial = serial.txt\ndefault_md = sha256\npolicy = p\ncopy_extensions = none\n"
                "unique_subject = no\n"
                f"x509_extensions = e\n[p]\ncommonName = supplied\n[e]\nsubjectAltName = {san}\n")
    if not os.path.exists(os.path.join(d, "serial.txt")):
        open(os.path.join(d, "index.txt"), "w").close()
        with open(os.path.join(d, "serial.txt"), "w") as f:
            f.write("1000\n")
    openssl("ca", "-config", "ca.cnf", "-batch", "-notext", "-cert", f"{ca}.pem", "-keyfile",
            f"{ca}.key", "-in", f"{name}.csr", "-out", f"{name}.pem",
            "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", cwd=d)


class Auth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proxy_bin = os.path.join(BUILD, "fairq-proxy")
        if not os.access(cls.proxy_bin, os.X_OK):
            raise unittest.SkipTest(f"no fairq-proxy in {BUILD}")
        cls.dir = tempfile.mkdtemp(prefix="fairq-auth-")
        d = cls.dir
        make_ca(d, "ca")
        make_ca(d, "other-ca")
        make_cert(d, "server", "ca", "IP:127.0.0.1,DNS:localhost")
        make_cert(d, "client", "ca", "DNS:fairq")
        make_expired_cert(d, "expired", "ca", "IP:127.0.0.1,DNS:localhost")
        make_expired_cert(d, "expired-client", "ca", "DNS:fairq")
        cls.nkey_public, seed = nkey.user(d)
        cls.seed_file = os.path.join(d, "fairq.nk")
        with open(cls.seed_file, "w") as f:
            f.write(seed + "\n")
        os.chmod(cls.seed_file, 0o600)
        cls.server = None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def tearDown(self):
        self.stop_server()

    # ---- a nats-server with TLS (client certificates verified) and users ----

    def start_server(self, cert="server"):
        self.stop_server()
        d = self.dir
        self.port = free_port()
        conf = os.path.join(d, "nats.conf")
        with open(conf, "w") as f:
            f.write(f"""listen: 127.0.0.1:{self.port}
jetstream {{ store_dir: "{d}/store-{self.port}" }}
tls {{
  cert_file: "{d}/{cert}.pem"
  key_file: "{d}/{cert}.key"
  ca_file: "{d}/ca.pem"
  verify: true
  timeout: 2
}}
authorization {{
  users: [
    {{user: fairq, password: "{PASSWORD}"}}
    {{nkey: {self.nkey_public}}}
  ]
}}
""")
        self.server_log = os.path.join(d, f"nats-{self.port}.log")
        with open(self.server_log, "w") as log:
            self.server = subprocess.Popen(["nats-server", "-c", conf], stdout=log, stderr=log)
        for _ in range(100):
            with open(self.server_log) as f:
                if "Server is ready" in f.read():
                    return
            time.sleep(0.05)
        self.fail("nats-server did not start: " + open(self.server_log).read())

    def stop_server(self):
        if self.server:
            self.server.terminate()
            self.server.wait(10)
            self.server = None

    # ---- the proxy on a config of its own ----

    def run_proxy(self, nats_yaml, until, timeout=15):
        """Start fairq-proxy with the nats: mapping nats_yaml (indented
        lines) on a plain nats:// URL, until its log holds one of the texts
        in until; stop it and return the log."""
        d = self.dir
        cfg = os.path.join(d, "fairq.yaml")
        with open(cfg, "w") as f:
            f.write(f"nats:\n  url: nats://127.0.0.1:{self.port}\n{nats_yaml}"
                    "http: {listen: \"\"}\nscheduler: {default_plan: free}\nplans: [{name: free}]\n")
        logpath = os.path.join(d, "proxy.log")
        with open(logpath, "w") as log:
            p = subprocess.Popen([self.proxy_bin, "-c", cfg], stdout=log, stderr=log)
        text = ""
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and p.poll() is None:
                with open(logpath) as f:
                    text = f.read()
                if any(u in text for u in until):
                    break
                time.sleep(0.05)
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            p.wait(15)
        with open(logpath) as f:
            return f.read()

    def tls_yaml(self, ca="ca", cert="client"):
        d = self.dir
        return (f"  tls:\n    ca: {d}/{ca}.pem\n    cert: {d}/{cert}.pem\n    key: {d}/{cert}.key\n")

    # ---- the cases ----

    def test_tls_verified_both_ways_with_user_and_password(self):
        self.start_server()
        log = self.run_proxy(self.tls_yaml() + f"  user: fairq\n  password: {PASSWORD}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertIn("fairq-proxy running", log)
        self.assertNotIn(PASSWORD, log)     # the password is never logged
        self.assertIn("nats.password=set", log)

    def test_tls_with_an_nkey(self):
        self.start_server()
        log = self.run_proxy(self.tls_yaml() + f"  nkey: {self.nkey_public}\n"
                             f"  nkey_seed: {self.seed_file}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertIn("fairq-proxy running", log)
        self.assertIn("nats.nkey_seed=set", log)     # the server knows no password for it

    def test_a_wrong_password_is_refused(self):
        self.start_server()
        log = self.run_proxy(self.tls_yaml() + "  user: fairq\n  password: not-it\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertNotIn("fairq-proxy running", log)
        self.assertRegex(log, r'msg="cannot reach NATS; retrying" reason="connect: .*'
                              r'(Authorization Violation|authorization violation)')

    def test_an_unknown_nkey_is_refused(self):
        self.start_server()
        other_public, other_seed = nkey.user(self.dir)
        seed_file = os.path.join(self.dir, "other.nk")
        with open(seed_file, "w") as f:
            f.write(other_seed + "\n")
        log = self.run_proxy(self.tls_yaml() + f"  nkey: {other_public}\n  nkey_seed: {seed_file}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertNotIn("fairq-proxy running", log)
        self.assertRegex(log, r"(?i)authorization violation")

    def test_a_server_signed_by_another_ca_is_refused(self):
        self.start_server()
        log = self.run_proxy(self.tls_yaml(ca="other-ca") + f"  user: fairq\n  password: {PASSWORD}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertNotIn("fairq-proxy running", log)
        self.assertRegex(log, r'cannot reach NATS; retrying" reason="connect: SSL Error: .*'
                              r'SSL handshake error: 20:unable to get local issuer certificate')

    def test_an_expired_server_certificate_is_refused(self):
        self.start_server(cert="expired")
        log = self.run_proxy(self.tls_yaml() + f"  user: fairq\n  password: {PASSWORD}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertNotIn("fairq-proxy running", log)
        self.assertRegex(log, r'cannot reach NATS; retrying" reason="connect: .*'
                              r'certificate has expired')

    def test_no_client_certificate_is_refused(self):
        self.start_server()
        log = self.run_proxy(f"  tls:\n    ca: {self.dir}/ca.pem\n  user: fairq\n  password: {PASSWORD}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertNotIn("fairq-proxy running", log)
        # nats.c sees only the connection closed; the proxy says why it may be.
        self.assertRegex(log, r"cannot reach NATS; retrying\" reason=\"connect: .*"
                              r"the server closed the TLS connection: it may refuse this client's "
                              r"certificate")

    def test_an_expired_client_certificate_is_refused(self):
        self.start_server()
        log = self.run_proxy(self.tls_yaml(cert="expired-client") +
                             f"  user: fairq\n  password: {PASSWORD}\n",
                             ["fairq-proxy running", "cannot reach NATS"])
        self.assertNotIn("fairq-proxy running", log)
        self.assertIn("the server closed the TLS connection: it may refuse this client's", log)
        with open(self.server_log) as f:
            self.assertIn("certificate has expired", f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
