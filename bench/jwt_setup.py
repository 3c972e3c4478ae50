# SPDX-License-Identifier: Apache-2.0
"""jwt_setup.py ALG DIR: for the JWT passes of bench/run.sh. Writes DIR/auth.yaml (the auth
section for ALG: HS256 with a secret file, ES256 with a PEM public key) and prints a service
token (scope room:service, app hyapp, valid 1 h) that every bench request carries."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integ"))
import jwt_util as jw  # noqa: E402

alg, d = sys.argv[1], sys.argv[2]
claims = jw.claims(1, "hyapp", ttl=3600, scope="room:service")
if alg == "HS256":
    secret = os.urandom(32).hex()
    with open(os.path.join(d, "hs256.secret"), "w") as f:
        f.write(secret)
    auth = f'auth: {{mode: jwt, jwt: {{hs256_secret_file: "{d}/hs256.secret"}}}}'
    token = jw.hs256(secret, claims)
else:
    key = jw.es256_key()
    with open(os.path.join(d, "es256.pem"), "wb") as f:
        f.write(jw.public_pem(key))
    auth = f'auth: {{mode: jwt, jwt: {{public_key_file: "{d}/es256.pem"}}}}'
    token = jw.es256(key, claims)
with open(os.path.join(d, "auth.yaml"), "w") as f:
    f.write(auth + "\n")
print(token)
