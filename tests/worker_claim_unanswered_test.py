#!/usr/bin/python3
"""worker_claim_unanswered_test.py -- a claim stored whose PubAck never came: the claimant works the run, and its pool completes it, though a reset durable hands the run to another worker first.

fairq-worker skips a run whose claim says another worker is working it
when it comes with delivery count 1 (a reset durable's replay: its holder
may still be working it), so that claim must be one its holder works. A
claim can be stored without its answer: the connection drops (or the
server dies) after the server took the claim in. Before the fix the
claimant took the failure for "unclaimed", handed the run back and went on;
the replay then went to another worker of the pool, which skipped it for
the claim in the claimant's name: a run the pool never completed
(worker_claims_test.sh failed so, 1 run in ~1,000, under load).

Deterministically, on a nats-server of its own, with fairq-proxy and one
claims pool:
  - worker A reaches the server through a relay in this test, which passes
    A's first claim (an HPUB to $KV.<bucket>.) on to the server whole, then
    cuts A's connection before anything comes back: the claim is stored, A
    gets no PubAck;
  - A is stopped (SIGSTOP); the server is stopped and its pool durable's
    state file removed, then started again: the durable resets, as a
    SIGKILL can reset it (worker_claims_test.sh);
  - worker B starts on the same durable and gets the replay (count 1): it
    skips the run for A's claim (checked: the precondition);
  - A goes on (SIGCONT): the pool must complete the run, and work it once.
"""
import glob
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

SRC = os.path.abspath(os.environ.get("FAIRQ_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..")))
BUILD = os.environ.get("FAIRQ_BUILD_DIR", os.path.join(SRC, "build"))
BUCKET = "claims_unanswered"
DURABLE = "pool-unanswered"
RUN_ID = "unanswered-1"
WAIT_S = 30     # a bound on each wait for a state; never a synchronisation by itself


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, pred, timeout=WAIT_S):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Relay:
    """TCP relay to the server. The first connection to send an HPUB to
    $KV.<BUCKET>. has that message passed on whole, then the server's side
    half-closed (the server reads the claim, then the end, and closes) and
    everything the server sends back dropped; once the server has closed,
    the client's side is closed: the claim stored, its PubAck lost. Later
    connections are relayed as they are."""

    MARK = f"HPUB $KV.{BUCKET}.".encode()

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]
        self.cut = threading.Event()
        self.armed = True
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                c.close()
                continue
            pair = {"cutting": False}
            threading.Thread(target=self.up, args=(c, s, pair), daemon=True).start()
            threading.Thread(target=self.down, args=(c, s, pair), daemon=True).start()

    def up(self, c, s, pair):
        buf = b""
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    break
                buf += data
                if not self.armed:
                    s.sendall(buf)
                    buf = b""
                    continue
                i = buf.find(self.MARK)
                if i < 0:
                    # Held back: only an end of buf that may begin the mark.
                    keep = next((k for k in range(min(len(buf), len(self.MARK) - 1), 0, -1)
                                 if buf.endswith(self.MARK[:k])), 0)
                    s.sendall(buf[:len(buf) - keep])
                    buf = buf[len(buf) - keep:]
                    continue
                eol = buf.find(b"\r\n", i)
                if eol < 0:
                    continue
                total = int(buf[i:eol].split()[-1])    # HPUB subj reply hdr_len total_len
                end = eol + 2 + total + 2
                if len(buf) < end:
                    continue
                self.armed = False
                pair["cutting"] = True
                s.sendall(buf[:end])
                s.shutdown(socket.SHUT_WR)
                return
            s.sendall(buf)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def down(self, c, s, pair):
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                if not pair["cutting"]:
                    c.sendall(data)
        except OSError:
            pass
        s.close()
        c.close()
        if pair["cutting"]:
            self.cut.set()

    def close(self):
        self.lsock.close()


class UnansweredClaim(unittest.TestCase):
    def setUp(self):
        for b in ("fairq-proxy", "fairq-worker", "fairq-producer", "fairq-admin"):
            if not os.access(os.path.join(BUILD, b), os.X_OK):
                self.skipTest(f"no {b} in {BUILD}")
        self.tmp = tempfile.mkdtemp(prefix="fairq-unanswered-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.procs = []
        self.nats = None
        self.relay = None
        self.stopped = None

    def tearDown(self):
        if self.stopped:
            os.kill(self.stopped.pid, signal.SIGCONT)
        for p in self.procs + ([self.nats] if self.nats else []):
            if p.poll() is None:
                p.kill()
            p.wait()
        if self.relay:
            self.relay.close()
        subprocess.run(["rm", "-rf", self.tmp])

    def start_nats(self):
        log = os.path.join(self.tmp, "nats.log")
        with open(log, "w") as f:
            self.nats = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port),
                                          "-sd", os.path.join(self.tmp, "store")],
                                         stdout=f, stderr=subprocess.STDOUT)
        wait_for("nats-server", lambda: "Server is ready" in read(log))

    def spawn(self, name, *args):
        out = open(os.path.join(self.tmp, f"{name}.out"), "w")
        err = open(os.path.join(self.tmp, f"{name}.err"), "w")
        p = subprocess.Popen([os.path.join(BUILD, args[0]), *args[1:]], stdout=out, stderr=err)
        out.close()
        err.close()
        self.procs.append(p)
        return p

    def worker(self, name, url):
        p = self.spawn(name, "fairq-worker", "--nats", url, "--durable", DURABLE, "--deliver", "all",
                       "--tokens-per-sec", "0", "--claim-bucket", BUCKET)
        wait_for(f"worker {name}", lambda: "waiting for runs" in self.log(name, "err"))
        return p

    def log(self, name, kind):
        return read(os.path.join(self.tmp, f"{name}.{kind}"))

    def test_unanswered_claim_is_worked(self):
        self.start_nats()
        self.spawn("proxy", "fairq-proxy", "-c", os.path.join(SRC, "config", "bench.yaml"),
                   "--nats", self.url)
        admin = [os.path.join(BUILD, "fairq-admin"), "--nats", self.url, "stats"]
        wait_for("fairq-proxy", lambda: subprocess.run(admin, capture_output=True).returncode == 0)
        self.relay = Relay(self.port)
        a = self.worker("a", f"nats://127.0.0.1:{self.relay.port}")
        subprocess.run([os.path.join(BUILD, "fairq-producer"), "--nats", self.url, "--tenant", "acme",
                        "--est", "10", "--run-id", RUN_ID, "--body", "x"],
                       check=True, capture_output=True)
        self.assertTrue(self.relay.cut.wait(WAIT_S), "worker A never claimed the run")
        # A holds the run, its claim stored and unanswered; it stays where it is.
        os.kill(a.pid, signal.SIGSTOP)
        self.stopped = a
        # The durable reset: the server stopped, the durable's state removed.
        self.nats.terminate()
        self.nats.wait()
        state = glob.glob(os.path.join(self.tmp, "store", "jetstream", "*", "streams", "FAIR_DISPATCH",
                                       "obs", DURABLE, "o.dat"))
        self.assertEqual(len(state), 1, "the pool durable's state file")
        os.remove(state[0])
        self.start_nats()
        self.worker("b", self.url)
        # Precondition: the replay (count 1) came to B, which skipped it for A's claim.
        wait_for("B to skip the run for A's claim",
                 lambda: f"the last acme/{RUN_ID}, claim 'working " in self.log("b", "err"))
        os.kill(a.pid, signal.SIGCONT)
        self.stopped = None
        done = f"done tenant=acme run_id={RUN_ID} "
        try:
            wait_for("the pool to complete the run",
                     lambda: done in self.log("a", "out") + self.log("b", "out"))
        except AssertionError:
            self.fail("the pool never completed the run whose claim was stored unanswered; "
                      f"A said: {self.log('a', 'err')!r}")
        worked = (self.log("a", "out") + self.log("b", "out")).count(f"run tenant=acme run_id={RUN_ID} ")
        self.assertEqual(worked, 1, "the run worked once")
        print(f"worker_claim_unanswered_test: ok (A's claim stored unanswered, B skipped the replay, "
              f"the run worked once)")


if __name__ == "__main__":
    unittest.main()
