"""50 searches at once against the web app (`serve`, on the loopback): their p50 and p95 latency (issue 44).

    PYTHONPATH=. python research/concurrent_searches.py LIBRARY PHOTO

One search first (the models load), then 50 `POST /api/query` at once, each on its own connection.
"""
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from serve.app import create_app
from serve.server import server_config

lib, photo = Path(sys.argv[1]), Path(sys.argv[2]).read_bytes()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
server = uvicorn.Server(server_config(create_app(lib, cache_dir=Path(tempfile.mkdtemp())), "127.0.0.1", port))
t = threading.Thread(target=server.run, daemon=True)
t.start()
while not server.started:
    time.sleep(0.05)


def one(out, i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.monotonic()
    c.request("POST", "/api/query?k=3", body=photo, headers={"Content-Type": "image/png"})
    r = c.getresponse()
    r.read()
    out[i] = (time.monotonic() - t0, r.status)


one([None], 0)
out = [None] * 50
threads = [threading.Thread(target=one, args=(out, i)) for i in range(50)]
t0 = time.monotonic()
for th in threads:
    th.start()
for th in threads:
    th.join()
wall = time.monotonic() - t0
lat = sorted(x[0] for x in out)
print(json.dumps({"status": sorted({x[1] for x in out}), "p50": round(statistics.median(lat), 2), "p95": round(lat[int(0.95 * len(lat)) - 1], 2), "max": round(lat[-1], 2), "wall": round(wall, 2)}))
server.should_exit = True
