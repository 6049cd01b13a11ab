"""nkey.py -- a NATS user nkey (seed and public key) made with openssl, for tests.

Debian 12 packages neither nsc nor nk. An nkey is an ed25519 key pair
written as nats-io/nkeys writes it: base32 (RFC 4648, no padding) of a
prefix, the 32 raw key bytes and a CRC-16/XMODEM of both, little-endian.
A user's public key has the one prefix byte 20 << 3 ("U..."); its seed has
two bytes, (18 << 3) | (20 << 3 >> 5) and (20 << 3 & 31) << 3 ("SU...").
openssl 3.0 (installed for the TLS tests anyway) makes the ed25519 key: the
last 32 bytes of its DER private key are the seed, of its DER public key the
public key. nats.c signs the server's nonce with the seed itself.
"""
import base64
import subprocess

PREFIX_SEED = 18 << 3
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


def user(workdir):
    """A new user nkey: (public "U...", seed "SU...")."""
    pem = f"{workdir}/nkey.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", pem], check=True,
                   capture_output=True)
    priv = subprocess.run(["openssl", "pkey", "-in", pem, "-outform", "DER"], check=True,
                          capture_output=True).stdout[-32:]
    pub = subprocess.run(["openssl", "pkey", "-in", pem, "-pubout", "-outform", "DER"], check=True,
                         capture_output=True).stdout[-32:]
    seed = encode([PREFIX_SEED | PREFIX_USER >> 5, (PREFIX_USER & 31) << 3], priv)
    return encode([PREFIX_USER], pub), seed
