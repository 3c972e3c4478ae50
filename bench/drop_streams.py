# SPDX-License-Identifier: Apache-2.0
"""drop_streams.py PORT PREFIX: deletes the JetStream streams whose names start with PREFIX
on the nats-server at 127.0.0.1:PORT (a bench pass's namespace, "bench_<pid>_"), so that runs
leave no streams behind on a shared server. Prints how many it deleted. Uses the tests' NATS
client (tests/integ/bus_util.py)."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "tests"), os.path.join(here, "..", "tests", "integ")]
from bus_util import Nats, js_delete_stream  # noqa: E402


def names(nc):
    """Every stream name (the API answers in pages)."""
    out, offset = [], 0
    while True:
        r = nc.api("STREAM.NAMES", {"offset": offset})
        page = r.get("streams") or []
        out += page
        offset += len(page)
        if not page or offset >= r.get("total", 0):
            return out


def main():
    port, prefix = int(sys.argv[1]), sys.argv[2]
    if not prefix.startswith("bench_"):
        sys.exit("drop_streams: the prefix must be a bench namespace (bench_...)")
    nc = Nats(port)
    gone = [s for s in names(nc) if s.startswith(prefix)]
    for s in gone:
        js_delete_stream(nc, s)
    nc.close()
    print(f"== {len(gone)} JetStream stream(s) of {prefix}* deleted")


if __name__ == "__main__":
    main()
