"""``teamlead view`` under a flood of idle connections from another process: the page still
answers its owner, and running into the connection cap (or out of descriptors) is one
warning, never a stream of tracebacks."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import tempfile
from urllib.parse import urlsplit

import pytest

from .browser import serving_view

pytestmark = [pytest.mark.slow]

#: Opens this many connections to the port it is given, all at once and each silent,
#: and holds them until its stdin closes; it prints how many connected (within 20 s).
_FLOOD = """
import resource, selectors, socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))
pending = selectors.DefaultSelector()
held = []
for _ in range(count):
    sock = socket.socket()
    sock.setblocking(False)
    sock.connect_ex(("127.0.0.1", port))
    held.append(sock)
    pending.register(sock, selectors.EVENT_WRITE)
connected = 0
end = time.monotonic() + 20
while pending.get_map() and time.monotonic() < end:
    for key, _ in pending.select(timeout=0.5):
        pending.unregister(key.fileobj)
        connected += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
print(connected, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize(
    ("open_files", "warning"),
    [
        pytest.param(
            256,
            r"teamlead view at its cap of 64 client connections \(open-file limit 256\): "
            r"closing the oldest idle ones to make room",
            id="at-the-cap",
        ),
        pytest.param(  # the cap (8) is more than the descriptors its own files leave
            12,
            r"teamlead view ran out of open files \(limit 12\) at \d client connections: "
            r"closing the oldest idle ones to make room",
            id="out-of-files",
        ),
    ],
)
def test_a_flood_of_idle_connections_leaves_the_page_answering_with_one_warning(
    open_files: int, warning: str
) -> None:
    with (
        tempfile.TemporaryFile("w+") as stderr,
        serving_view(dict(os.environ), open_files=open_files, stderr=stderr) as url,
    ):
        port = urlsplit(url).port or 0
        flood = subprocess.Popen(
            [sys.executable, "-c", _FLOOD, str(port), "1100"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert flood.stdout is not None
            connected = int(flood.stdout.readline())
            assert connected == 1100  # the view took every one of them, closing the idle
            owner = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                owner.request("GET", f"/?{urlsplit(url).query}")
                answer = owner.getresponse()
                assert answer.status == 200 and b"teamlead runs" in answer.read()
            finally:
                owner.close()
        finally:
            flood.communicate(input="", timeout=30)
        stderr.flush()
        stderr.seek(0)
        said = stderr.read()
    assert re.fullmatch(f"teamlead: warning: {warning}\n", said), said
