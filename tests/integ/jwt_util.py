# SPDX-License-Identifier: Apache-2.0
"""jwt_util: minting JWTs for the auth tests (HS256 with hmac, ES256/RS256 with the
`cryptography` package), and the tampered shapes the endpoint x caller matrix sends."""
import base64
import hashlib
import hmac
import json
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(sub, app="hyapp", ttl=300, scope=None, **extra):
    now = int(time.time())
    c = {"sub": str(sub), "app": app, "exp": now + ttl, "iat": now}
    if scope:
        c["scope"] = scope
    c.update(extra)
    return c


def _signing_input(alg, payload):
    head = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    body = b64(json.dumps(payload).encode())
    return f"{head}.{body}"


def hs256(secret, payload):
    si = _signing_input("HS256", payload)
    sig = hmac.new(secret.encode() if isinstance(secret, str) else secret, si.encode(),
                   hashlib.sha256).digest()
    return f"{si}.{b64(sig)}"


def es256_key():
    return ec.generate_private_key(ec.SECP256R1())


def rs256_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key):
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def es256(key, payload):
    si = _signing_input("ES256", payload)
    r, s = decode_dss_signature(key.sign(si.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{si}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def rs256(key, payload):
    si = _signing_input("RS256", payload)
    return f"{si}.{b64(key.sign(si.encode(), padding.PKCS1v15(), hashes.SHA256()))}"


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


# --- JWKS (auth.jwt.jwks_file): keys as JWKs, tokens naming their key by kid ----------------

def _uint_b64(n, size=None):
    size = size or (n.bit_length() + 7) // 8
    return b64(n.to_bytes(size, "big"))


def jwk(key, kid, alg=True):
    """The public JWK of an EC P-256 / RSA private key, or of an HS256 secret (bytes/str: an oct
    key), with kid (and its alg member unless alg is False)."""
    if isinstance(key, (bytes, str)):
        k = {"kty": "oct", "k": b64(key.encode() if isinstance(key, str) else key)}
        name = "HS256"
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        nums = key.public_key().public_numbers()
        k = {"kty": "EC", "crv": "P-256", "x": _uint_b64(nums.x, 32), "y": _uint_b64(nums.y, 32)}
        name = "ES256"
    else:
        nums = key.public_key().public_numbers()
        k = {"kty": "RSA", "n": _uint_b64(nums.n), "e": _uint_b64(nums.e)}
        name = "RS256"
    k["kid"] = kid
    k["use"] = "sig"
    if alg:
        k["alg"] = name
    return k


def sign_kid(key, payload, kid):
    """A token signed with key (as jwk() reads it) whose header names kid (None: no kid)."""
    if isinstance(key, (bytes, str)):
        alg = "HS256"
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        alg = "ES256"
    else:
        alg = "RS256"
    h = {"alg": alg, "typ": "JWT"}
    if kid is not None:
        h["kid"] = kid
    si = f"{b64(json.dumps(h).encode())}.{b64(json.dumps(payload).encode())}"
    if alg == "HS256":
        sig = hmac.new(key.encode() if isinstance(key, str) else key, si.encode(),
                       hashlib.sha256).digest()
    elif alg == "ES256":
        r, s = decode_dss_signature(key.sign(si.encode(), ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        sig = key.sign(si.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{si}.{b64(sig)}"
