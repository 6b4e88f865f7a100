"""A real build farm for the benchmarks (bench/worker, bench/bazel): a PostgreSQL
cluster of the run's own, BuildGrid 0.4.4 (scripts/fetch-buildgrid) on 127.0.0.1 with
the tests' configuration (cli/tests/farm/buildgrid.yml), and the workers' --stats lines."""

import json
import os
import socket
import subprocess
import time
from pathlib import Path

PG = "/usr/lib/postgresql/15/bin"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []) + cmd


def start_farm(work, bgd):
    for sub in ("pg", "sock", "cas"):
        (work / sub).mkdir()
    (work / "pg.log").touch()
    if os.geteuid() == 0:
        for sub in ("pg", "sock", "pg.log"):
            run(["chown", "postgres", str(work / sub)])
    pg_port = free_port()
    run(as_postgres([f"{PG}/initdb", "-D", str(work / "pg"), "-A", "trust", "-U", "postgres",
                     "--no-sync"]), capture_output=True)
    run(as_postgres([f"{PG}/pg_ctl", "-D", str(work / "pg"), "-o",
                     f"-k {work / 'sock'} -p {pg_port} -c listen_addresses='' -c fsync=off",
                     "-l", str(work / "pg.log"), "-w", "start"]), capture_output=True)
    run(as_postgres([f"{PG}/createdb", "-h", str(work / "sock"), "-p", str(pg_port), "bgd"]))
    url = f"postgresql+psycopg2://postgres@/bgd?host={work / 'sock'}&port={pg_port}"
    run([str(bgd), "migrate", "apply", url], capture_output=True)
    port = free_port()
    # The tests' configuration (cli/tests/farm/buildgrid.yml).
    template = (Path(__file__).resolve().parent.parent / "cli/tests/farm/buildgrid.yml").read_text()
    (work / "bgd.yml").write_text(template.replace("@PORT@", str(port)).replace("@URL@", url)
                                  .replace("@CAS@", str(work / "cas")))
    server = subprocess.Popen([str(bgd), "server", "start", str(work / "bgd.yml")], cwd=work,
                              stdout=open(work / "bgd.log", "w"), stderr=subprocess.STDOUT)
    for _ in range(1200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return server, port


def stop_farm(work, server):
    server.terminate()
    server.wait()
    subprocess.run(as_postgres([f"{PG}/pg_ctl", "-D", str(work / "pg"), "-m", "immediate",
                                "stop"]), capture_output=True)


def actions(stats):
    return [json.loads(l)["action"] for l in stats.read_text().splitlines()
            if l.startswith('{"action"')]
