"""The stack's REST client against a real local HTTP server that answers like the api-server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.integration.conftest import airflow_stack_module as stack

ROLLED_BACK = {"detail": {"reason": "Database error", "statement": "hidden", "orig_error": "hidden"}}


@pytest.fixture
def server() -> Iterator[dict]:
    """Answers each (method, path) from a queue of (status, body); records every call."""
    state: dict = {"answers": {}, "calls": []}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            state["calls"].append((self.command, self.path))
            if self.path == "/auth/token":
                status, body = 201, {"access_token": "t"}
            else:
                status, body = state["answers"][(self.command, self.path)].pop(0)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_PATCH = do_GET = _answer

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state["client"] = stack.AirflowClient(f"http://127.0.0.1:{httpd.server_port}", "u", "p")
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_patch_the_database_rolled_back_is_sent_again(server):
    path = "/api/v2/dags/d/dagRuns/r"
    server["answers"][("PATCH", path)] = [(500, ROLLED_BACK), (200, {"state": "failed"})]
    assert server["client"].patch(path, {"state": "failed"}) == {"state": "failed"}
    assert server["calls"].count(("PATCH", path)) == 2


def test_other_failures_and_other_methods_are_not_retried(server):
    path = "/api/v2/dags/d/dagRuns/r"
    server["answers"][("PATCH", path)] = [(500, {"detail": "boom"}), (200, {})]
    with pytest.raises(stack.StackError, match="answered 500"):
        server["client"].patch(path, {"state": "failed"})
    server["answers"][("POST", "/api/v2/dags/d/dagRuns")] = [(500, ROLLED_BACK), (200, {})]
    with pytest.raises(stack.StackError, match="Database error"):
        server["client"].post("/api/v2/dags/d/dagRuns", {"dag_run_id": "r"})
    # A PATCH rolled back every time fails after the retries, naming the database error.
    server["answers"][("PATCH", path)] = [(500, ROLLED_BACK)] * (stack.DB_ERROR_RETRIES + 1)
    with pytest.raises(stack.StackError, match="Database error"):
        server["client"].patch(path, {"state": "failed"})
    assert server["calls"].count(("PATCH", path)) == 1 + stack.DB_ERROR_RETRIES + 1
