"""An `spsim serve` app on a free local port, in this process (uvicorn on a thread), for tests."""

from __future__ import annotations

import socket
import threading
import time

import httpx


class LocalServer:
    def __init__(self, serving, **kw):
        import uvicorn

        from spsim.server.run import build_server

        self.engine, self.app = build_server(serving, device="cpu", **kw)
        self.engine.start()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            if time.time() - t0 > 30:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)

    def client(self):
        from openai import OpenAI

        return OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120)

    def summary(self) -> dict:
        return httpx.get(self.url + "/spsim/summary").json()

    def idle(self, timeout: float = 30.0) -> dict:
        """The summary once nothing runs or waits (aborts land between passes)."""
        t0 = time.time()
        while True:
            s = self.summary()
            if (s["running"] == 0 and s["waiting"] == 0) or time.time() - t0 > timeout:
                return s
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.engine.stop()
