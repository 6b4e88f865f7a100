"""Helpers the python benchmark scripts share."""

import subprocess
import sys
import time


def start_server(w, export, work, who):
    """Starts `wasm9p serve --export EXPORT` on a free loopback port: (process, ADDR)."""
    log = open(work / "serve.log", "w+")
    proc = subprocess.Popen([str(w), "serve", "--export", str(export), "--listen",
                             "tcp:127.0.0.1:0"], stderr=log)
    for _ in range(100):
        log.seek(0)
        for line in log:
            if "serving" in line and " on tcp:" in line:
                return proc, line.rsplit(" on ", 1)[1].strip()
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"{who}: wasm9p serve did not start")
