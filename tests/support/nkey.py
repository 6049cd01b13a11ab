"""nkey.py -- NATS nkeys, JWTs and credentials files, made for tests.

Debian 12 packages neither nsc nor nk, nor nats-io/nkeys or nats-io/jwt for
Python, so the tests make their own with Debian's python3-cryptography
(its Ed25519, from OpenSSL), written the way nats-io/nkeys and nats-io/jwt
v2 write them:

- An nkey is an ed25519 key pair in base32 (RFC 4648, no padding) of a
  prefix, the 32 raw key bytes and a CRC-16/XMODEM of both, little-endian.
  A public key has one prefix byte, the role's (operator 14 << 3 "O...",
  account 0 "A...", user 20 << 3 "U..."); a seed has two: (18 << 3) |
  (role >> 5) and (role & 31) << 3 ("SO...", "SA...", "SU...").
- A JWT is base64url (no padding) of the header {"typ":"JWT","alg":
  "ed25519-nkey"}, ".", base64url of the claims, ".", base64url of the
  issuer's ed25519 signature of the two. The claims: jti (base32 of the
  SHA-512/256 of the claims with jti empty), iat, iss (the signer's public
  key), name, sub (the subject's public key), exp if it expires, and nats:
  the role's own fields with type and version 2.
- An operator signs itself and its accounts; an account signs its users,
  and revokes a user with "revocations": {user key: time}: a user JWT
  issued at or before that time is refused.
- A credentials file holds a user's JWT and its seed between the marker
  lines nsc writes; the client signs the server's nonce with the seed.
"""
import base64
import hashlib
import json
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

PREFIX_SEED = 18 << 3
PREFIX_OPERATOR = 14 << 3
PREFIX_ACCOUNT = 0
PREFIX_USER = 20 << 3


def crc16(data):
    """CRC-16/XMODEM (poly 0x1021, initial 0), as nkeys and nats.c compute it."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def encode(prefix, key):
    raw = bytes(prefix) + key
    raw += crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("=")


def b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class KeyPair:
    """An ed25519 key pair of one role: .public ("O...", "A...", "U..."),
    .seed ("SO...", ...), and sign()."""

    def __init__(self, role):
        self.key = Ed25519PrivateKey.generate()
        raw_priv = self.key.private_bytes(serialization.Encoding.Raw,
                                          serialization.PrivateFormat.Raw,
                                          serialization.NoEncryption())
        raw_pub = self.key.public_key().public_bytes(serialization.Encoding.Raw,
                                                     serialization.PublicFormat.Raw)
        self.public = encode([role], raw_pub)
        self.seed = encode([PREFIX_SEED | role >> 5, (role & 31) << 3], raw_priv)

    def sign(self, data):
        return self.key.sign(data)


def user(workdir=None):
    """A new user nkey: (public "U...", seed "SU...")."""
    del workdir     # kept for callers that passed a scratch directory
    kp = KeyPair(PREFIX_USER)
    return kp.public, kp.seed


def jwt(issuer, subject, name, nats, expires=None, issued_at=None):
    """A JWT of claims nats (type and version 2 added) about subject's
    public key, signed by the KeyPair issuer."""
    claims = {"iat": int(time.time()) if issued_at is None else issued_at,
              "iss": issuer.public, "jti": "", "name": name, "sub": subject}
    if expires is not None:
        claims["exp"] = expires
    claims["jti"] = base64.b32encode(hashlib.new(
        "sha512_256", json.dumps(claims, separators=(",", ":")).encode()).digest()
    ).decode().rstrip("=")
    claims["nats"] = dict(nats, version=2)
    header = b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"},
                               separators=(",", ":")).encode())
    payload = b64url(json.dumps(claims, separators=(",", ":")).encode())
    signed = f"{header}.{payload}"
    return f"{signed}.{b64url(issuer.sign(signed.encode()))}"


def operator_jwt(op, name="fairq-test-operator"):
    return jwt(op, op.public, name, {"type": "operator"})


UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
             "wildcards": True, "conn": -1, "leaf": -1}


def account_jwt(op, acct, name, jetstream=True, revocations=None):
    """An account's JWT, signed by the operator: no limits, JetStream on
    (unlimited) if jetstream, users revoked as revocations says."""
    limits = dict(UNLIMITED)
    if jetstream:
        limits.update({"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1})
    nats = {"type": "account", "limits": limits,
            "default_permissions": {"pub": {}, "sub": {}}}
    if revocations:
        nats["revocations"] = revocations
    return jwt(op, acct.public, name, nats)


def user_jwt(acct, user_public, name, expires=None, issued_at=None):
    """A user's JWT, signed by its account's KeyPair: no limits."""
    return jwt(acct, user_public, name,
               {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
               expires=expires, issued_at=issued_at)


def creds(user_jwt_text, seed):
    """The text of a credentials file, as nsc writes one."""
    return ("-----BEGIN NATS USER JWT-----\n"
            f"{user_jwt_text}\n"
            "------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            "-----BEGIN USER NKEY SEED-----\n"
            f"{seed}\n"
            "------END USER NKEY SEED------\n\n"
            "*************************************************************\n")
