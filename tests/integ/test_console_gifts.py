# SPDX-License-Identifier: Apache-2.0
"""test_console_gifts: the console's gift catalog view (console/gifts.js) in headless Chromium
(tests/integ/console_gifts_test.js), against a real roomd: the seeded gift is shown, a price
changed through the form and a disable by the row's button reach the store (the API agrees),
and a save based on a stale version is refused with version_conflict, nothing written."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import http_util as hu  # noqa: E402
import test_console as tc  # noqa: E402  (its browser check)
from roomd_test import Roomd, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def test_console_gifts():
    tc.need_browser()
    rd = Roomd({"admin": {"token_env": "ROOMD_TEST_ADMIN"}})
    rd.admin_token = tc.TOKEN
    rd.start(env=tc.ENV)
    try:
        hu.expect_ok(hu.put_gift(rd, "ring", 1000, energy_per_unit=10), "seed")
        p = subprocess.run(["node", os.path.join(HERE, "console_gifts_test.js")],
                           capture_output=True, text=True, timeout=180, env=dict(
                               os.environ,
                               CONSOLE_URL=f"http://127.0.0.1:{rd.admin_port}/console/",
                               CONSOLE_TOKEN=tc.TOKEN))
        assert p.returncode == 0, p.stdout + p.stderr
        seen = json.loads(p.stdout.strip().splitlines()[-1])
        assert seen["seeded_price"] == 1000 and seen["catalog"] == "off", seen
        assert seen["version_after_edit"] == 2 and seen["enabled_after_toggle"] == "no", seen
        assert "version_conflict" in seen["conflict_note"] and not seen["errors"], seen
        js = hu.expect_ok(rd.http("GET", "/v1/gifts"), "catalog")
        g = js["gifts"][0]
        assert (g["unit_price"], g["energy_per_unit"], g["enabled"], g["version"]) == \
            (1500, 10, False, 3), g
    finally:
        rd.stop()


if __name__ == "__main__":
    run([test_console_gifts])
