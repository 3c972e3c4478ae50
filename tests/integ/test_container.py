# SPDX-License-Identifier: Apache-2.0
"""test_container: the container recipe and the compose file, checked without a container
engine (none is installed on the test machines, and images cannot be pulled here).
deploy/compose/compose.yaml parses (PyYAML, merge keys as compose reads them) and describes
docs/cluster.md's topology: three roomd nodes, MariaDB, Redis, three nats-servers. Every roomd
node mounts configs/docker.yaml as /etc/roomd/roomd.yaml and passes environment variables
only of two kinds, the entrypoint's (ROOMD_NODE_ID, ROOMD_ADVERTISE_HOST) and the secrets
the config's *_env keys name (which deploy/roomd.env.example lists). The config each node
reads, rendered by deploy/container/entrypoint.sh from that node's environment, passes
`roomd --check-config` (every key one roomd accepts; the secrets set), names its own node
and a host other nodes reach, and every server host it names is a service of the file;
the ports the file publishes are the ones the config listens on; MariaDB's user and database
are the config's. The Containerfile installs the .debs built from the tree and runs as roomd."""
import os
import re
import subprocess
import tempfile

import yaml

from roomd_test import BUILD, SOURCE, run

TMP = tempfile.mkdtemp(prefix="roomd-container-")
COMPOSE = os.path.join(SOURCE, "deploy", "compose", "compose.yaml")
ENTRY = os.path.join(SOURCE, "deploy", "container", "entrypoint.sh")
ENTRY_VARS = {"ROOMD_NODE_ID", "ROOMD_ADVERTISE_HOST"}


def load():
    with open(COMPOSE) as f:
        doc = yaml.safe_load(f)
    assert isinstance(doc.get("services"), dict), doc
    return doc


def roomd_nodes(doc):
    return {n: s for n, s in doc["services"].items() if "deploy/container/Containerfile" in
            str(s.get("build", {}).get("dockerfile", ""))}


def mounted_config(svc):
    for v in svc.get("volumes", []):
        src, dst = v.split(":")[:2]
        if dst == "/etc/roomd/roomd.yaml":
            return os.path.normpath(os.path.join(os.path.dirname(COMPOSE), src))
    raise AssertionError(f"no config volume on /etc/roomd/roomd.yaml: {svc.get('volumes')}")


def secret_vars(cfg_text):
    return set(re.findall(r'^\s+\w+_env:\s*"([A-Z0-9_]+)"', cfg_text, re.M))


def example_vars():
    with open(os.path.join(SOURCE, "deploy", "roomd.env.example")) as f:
        return set(re.findall(r"^#?([A-Z][A-Z0-9_]+)=", f.read(), re.M))


def render(cfg, env):
    p = subprocess.run(["sh", ENTRY, "render"], capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, ROOMD_CONFIG=cfg, **env))
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_topology():
    doc = load()
    nodes = roomd_nodes(doc)
    assert sorted(nodes) == ["node0", "node1", "node2"], sorted(nodes)
    services = set(doc["services"])
    assert {"mariadb", "redis", "nats1", "nats2", "nats3"} <= services, services
    for name in ("nats1", "nats2", "nats3"):
        cmd = doc["services"][name]["command"]
        assert "-js" in cmd and "--cluster_name" in cmd, cmd
        routes = cmd[cmd.index("--routes") + 1].split(",")
        assert sorted(r.split("//")[1].split(":")[0] for r in routes) == \
            sorted({"nats1", "nats2", "nats3"} - {name}), routes
    for name, svc in nodes.items():
        assert set(svc["depends_on"]) >= {"mariadb", "redis", "nats1", "nats2", "nats3"}
        assert svc.get("user") in (None, "roomd"), "a node runs as root"


def test_nodes_config_accepted():
    doc = load()
    services = set(doc["services"])
    ids, hosts = set(), set()
    for name, svc in roomd_nodes(doc).items():
        cfg = mounted_config(svc)
        assert os.path.isfile(cfg), cfg
        with open(cfg) as f:
            text = f.read()
        secrets = secret_vars(text)
        assert len(secrets) == 4 and secrets <= example_vars(), (secrets, example_vars())
        env = {str(k): str(v) for k, v in (svc.get("environment") or {}).items()}
        unknown = set(env) - ENTRY_VARS - secrets
        assert not unknown, f"{name}: environment no one reads: {unknown}"
        assert svc["env_file"] == ["roomd.env"], svc["env_file"]
        rendered = render(cfg, env)
        path = os.path.join(TMP, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(rendered)
        secret_env = {v: "s" * 40 for v in secrets}
        p = subprocess.run([os.path.join(BUILD, "roomd"), "--check-config", path],
                           capture_output=True, text=True, timeout=20, cwd=TMP,
                           env=dict(os.environ, **secret_env))
        assert p.returncode == 0 and f"{path}: ok" in p.stdout, (name, p.stdout, p.stderr)
        conf = yaml.safe_load(rendered)
        ids.add(conf["app"]["node_id"])
        for lst in ("http", "admin"):
            host, port = conf[lst]["advertise_addr"].rsplit(":", 1)
            assert host == name and host in services, (name, lst, host)
            assert port == conf[lst]["listen"].rsplit(":", 1)[1]
            hosts.add(host)
        # what the node connects to is in the file
        assert conf["store"]["mysql"]["host"] in services
        assert conf["redis"]["addr"].rsplit(":", 1)[0] in services
        for url in conf["rocketmq"]["name_servers"]:
            assert url.split("//")[1].split(":")[0] in services, url
        assert conf["rocketmq"]["stream_replicas"] == 3 and conf["lease"]["driver"] == "redis"
        # the container ports published are the listeners
        listen = {conf[k]["listen"].rsplit(":", 1)[1] for k in ("http", "admin", "grpc")}
        published = {str(p).rsplit(":", 1)[1] for p in svc["ports"]}
        assert published == listen, (published, listen)
        db = doc["services"]["mariadb"]["environment"]
        assert db["MARIADB_USER"] == conf["store"]["mysql"]["user"]
        assert db["MARIADB_DATABASE"] == conf["store"]["mysql"]["database"]
        assert "${" + conf["store"]["mysql"]["password_env"] in db["MARIADB_PASSWORD"]
    assert ids == {"node0", "node1", "node2"} and len(hosts) == 3, (ids, hosts)


def test_entrypoint_refuses_bad_values():
    p = subprocess.run(["sh", ENTRY, "render"], capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, ROOMD_CONFIG=os.path.join(SOURCE, "configs",
                                "docker.yaml"), ROOMD_NODE_ID='x"; rm -rf /'))
    assert p.returncode == 2 and "ROOMD_NODE_ID" in p.stderr, p


def test_containerfile():
    with open(os.path.join(SOURCE, "deploy", "container", "Containerfile")) as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) == 2 and all("debian:bookworm" in ln for ln in froms), froms
    text = "\n".join(lines)
    assert "dpkg-buildpackage -us -uc -b" in text and "apt-get build-dep -y ./" in text
    assert re.search(r"apt-get install .*roomd_\*\.deb", text), text
    users = [ln for ln in lines if ln.startswith("USER ")]
    assert users == ["USER roomd"], users
    assert lines.index("USER roomd") > max(i for i, ln in enumerate(lines) if ln.startswith("RUN "))
    assert 'ENTRYPOINT ["/usr/local/bin/roomd-entrypoint"]' in lines
    assert "COPY deploy/container/entrypoint.sh /usr/local/bin/roomd-entrypoint" in lines
    assert os.access(ENTRY, os.X_OK)


if __name__ == "__main__":
    run([test_topology, test_nodes_config_accepted, test_entrypoint_refuses_bad_values,
         test_containerfile])
