"""``scripts/start.sh``: the JupyterLab command it ends with prints, for ``--no-browser``, the quickstart
notebook's URL with its token (not the Launcher's), and that URL opens the notebook; it serves a git-ignored copy of
the examples that keeps the user's notebooks. Runs the script's own command line (set-up skipped) as a real server;
every wait is bounded. And ``scripts/test.sh``'s own steps."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.free_ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_URL = re.compile(r"http://127\.0\.0\.1:(\d+)/lab/tree/quickstart\.ipynb\?token=([0-9a-f]+)")


def jupyter_command() -> list[str]:
    """The ``exec .venv/bin/jupyter lab ...`` line of start.sh, continuation lines joined, without the
    shell-only arguments (root flag, the script's own arguments)."""
    text = (REPO / "scripts" / "start.sh").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("exec .venv/bin/jupyter lab"))
    words = shlex.split(line.split("#")[0])[1:]
    return [word for word in words if not word.startswith("${") and word != "$@"]


def _first_page(url: str, server: subprocess.Popen[bytes], log: Path) -> str:
    """The page at ``url``, asked again for a few seconds while the connection is refused (a loaded machine); a
    failure shows the server's log."""
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                assert response.status == 200
                return str(response.read().decode())
        except urllib.error.URLError as error:
            if time.monotonic() > deadline or server.poll() is not None:
                raise AssertionError(f"{error}; the server said:\n{log.read_text()[-3000:]}") from error
            time.sleep(0.5)


def make_working_copy(checkout: Path) -> None:
    """Run start.sh's step that makes ``notebooks/``, the served copy of ``examples/``, in ``checkout``."""
    text = (REPO / "scripts" / "start.sh").read_text()
    step = text[text.index("# working copy: begin") : text.index("# working copy: end")]
    subprocess.run(["bash", "-euo", "pipefail", "-c", step], cwd=checkout, check=True, timeout=60)


def test_lab_serves_a_working_copy_git_ignores_that_keeps_the_users_notebooks(tmp_path: Path) -> None:
    """The examples stay as committed and the suite takes only them: what the user runs and saves in JupyterLab
    (JupyterLab saves on its own), and the notebooks they make, land in the ignored ``notebooks/``, kept there."""
    assert "--ServerApp.root_dir=notebooks" in jupyter_command()
    ignored = subprocess.run(["git", "check-ignore", "-q", "notebooks/Untitled.ipynb"], cwd=REPO, timeout=60)
    assert ignored.returncode == 0, "notebooks/ is not ignored by git"
    (tmp_path / "examples").mkdir()
    for name in ("quickstart.ipynb", "first-steps.ipynb"):
        (tmp_path / "examples" / name).write_text(f"committed {name}")
    make_working_copy(tmp_path)
    served = tmp_path / "notebooks"
    assert sorted(path.name for path in served.iterdir()) == ["first-steps.ipynb", "quickstart.ipynb"]
    (served / "quickstart.ipynb").write_text("run and saved by the user")
    (served / "Untitled.ipynb").write_text("the user's own")
    (tmp_path / "examples" / "linear-algebra.ipynb").write_text("a new example")
    make_working_copy(tmp_path)  # the next start: the user's files kept, the new example copied
    assert (served / "quickstart.ipynb").read_text() == "run and saved by the user"
    assert (served / "Untitled.ipynb").read_text() == "the user's own"
    assert (served / "linear-algebra.ipynb").read_text() == "a new example"
    assert (tmp_path / "examples" / "quickstart.ipynb").read_text() == "committed quickstart.ipynb"


def test_no_browser_prints_the_quickstart_url_with_its_token(tmp_path: Path) -> None:
    command = jupyter_command()
    assert command[:2] == [".venv/bin/jupyter", "lab"]
    command[0] = str(Path(sys.executable).parent / "jupyter")
    # the served folder, made by start.sh's own step from the examples, here in a folder of the test's own
    checkout = tmp_path / "checkout"
    (checkout / "examples").mkdir(parents=True)
    (checkout / "examples" / "quickstart.ipynb").write_bytes((REPO / "examples" / "quickstart.ipynb").read_bytes())
    make_working_copy(checkout)
    command = [f"--ServerApp.root_dir={checkout / 'notebooks'}" if word.startswith("--ServerApp.root_dir=")
               else word for word in command]  # fmt: skip
    command += ["--no-browser", f"--port={free_port()}", "--ServerApp.port_retries=0"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        found = None
        deadline = time.monotonic() + 90
        while found is None and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.5)
            found = NOTEBOOK_URL.search(log.read_text())
        assert found is not None, log.read_text()[-3000:]
        assert "/lab?token=" not in log.read_text()  # no Launcher URL beside it
        page = _first_page(found.group(0), server, log)
        assert '"treePath": "quickstart.ipynb"' in page
        port, token = found.groups()  # and that path is the notebook, in the folder the file browser shows
        contents = f"http://127.0.0.1:{port}/api/contents/quickstart.ipynb?content=0&token={token}"
        with urllib.request.urlopen(contents, timeout=30) as response:
            assert response.status == 200 and json.loads(response.read())["type"] == "notebook"
        # no "get notified about official Jupyter news?" popup over the notebook
        settings = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}"
        with urllib.request.urlopen(settings, timeout=30) as response:
            defaults = json.loads(response.read())["schema"]["properties"]  # the overrides become the defaults
        assert defaults["fetchNews"]["default"] == "false" and defaults["checkForUpdates"]["default"] is False
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def test_its_kernels_run_encrypted_without_the_plain_tcp_warning(tmp_path: Path) -> None:
    """start.sh's server gives its kernels CurveZMQ keys: a kernel started through it runs code over the
    browser's websocket, and ipykernel's "running over TCP without encryption" warning is not in the log."""
    command = jupyter_command()
    command[0] = str(Path(sys.executable).parent / "jupyter")
    root = tmp_path / "notebooks"
    root.mkdir()
    command = [f"--ServerApp.root_dir={root}" if word.startswith("--ServerApp.root_dir=") else word
               for word in command]  # fmt: skip
    port = free_port()
    command += ["--no-browser", f"--port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=t0k"]
    if os.geteuid() == 0:
        command.append("--allow-root")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path)}
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _first_page(f"http://127.0.0.1:{port}/api/status?token=t0k", server, log)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels?token=t0k", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            kernel_id = json.loads(response.read())["id"]
        printed = asyncio.run(_run_code(f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?token=t0k"))
        assert printed == "6\n", log.read_text()[-3000:]
        text = log.read_text()
        assert f"Kernel started: {kernel_id}" in text, text[-3000:]
        assert "without encryption" not in text, text[-3000:]
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


async def _run_code(url: str) -> str:
    """What ``print(2 * 3)`` prints in the kernel at ``url``, run through its websocket as JupyterLab runs a cell
    (until the kernel is idle again, at most 120 s)."""
    from tornado.websocket import websocket_connect

    connection = await asyncio.wait_for(websocket_connect(url), 60)
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "t", "session": uuid.uuid4().hex,
              "date": "", "version": "5.3"}  # fmt: skip
    content = {"code": "print(2 * 3)", "silent": False, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}  # fmt: skip
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
    connection.write_message(json.dumps(message))
    printed = ""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(connection.read_message(), max(deadline - time.monotonic(), 0.1))
            assert raw is not None, "the websocket closed"
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if reply["msg_type"] == "stream":
                printed += reply["content"]["text"]
            if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                return printed  # after its output
        raise AssertionError(f"no reply from the kernel in 120 s; printed so far: {printed!r}")
    finally:
        connection.close()


def test_it_says_what_it_does_while_it_installs() -> None:
    """The ~20 s of installing are not silent: each step prints a line before it runs."""
    start = (REPO / "scripts" / "start.sh").read_text()
    setup = (REPO / "scripts" / "setup-env.sh").read_text()
    assert start.index("creating .venv and installing") < start.index("bash scripts/setup-env.sh")
    for step in ("creating .venv", "pip: upgrading pip", "pip: JupyterLab", "pip: gpu-magics"):
        assert f'echo "  {step}' in setup, step
    lines = [line.strip() for line in setup.splitlines()]
    pips = [i for i, line in enumerate(lines) if line.startswith(".venv/bin/python -m pip install")]
    assert pips and all(lines[i - 1].startswith("echo ") for i in pips)  # each install announced


@pytest.mark.slow
def test_the_test_scripts_labextension_step_leaves_a_redirected_log_readable(tmp_path: Path) -> None:
    """``bash scripts/test.sh > log 2>&1``: the step that lists the extension writes into the log, never over it
    (a ``tee /dev/stderr`` there reopened the log and left NUL bytes where earlier steps wrote)."""
    script = (REPO / "scripts" / "test.sh").read_text()
    found = re.search(r"step \"labextension list\" bash -c '(.+)'\n", script)
    assert found is not None
    log = tmp_path / "log"
    with log.open("w") as out:
        out.write("earlier steps wrote this\n")
        out.flush()
        done = subprocess.run(["bash", "-c", found.group(1)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    text = log.read_bytes()
    assert done.returncode == 0, text.decode(errors="replace")
    assert b"\x00" not in text and text.startswith(b"earlier steps wrote this\n") and b"gpu-magics" in text


def test_the_test_script_fails_a_run_that_changed_a_tracked_file(tmp_path: Path) -> None:
    """test.sh's last step: a tracked file the tests or the docs build changed fails the run, named; files git
    ignores, untracked ones and edits made before the run do not."""
    script = (REPO / "scripts" / "test.sh").read_text()
    functions = [re.search(rf"\n({name}\(\) {{.*?\n}}\n)", script, re.S) for name in ("tracked", "tracked_unchanged")]
    assert all(functions)
    defined = "".join(found.group(1) for found in functions if found)

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True, timeout=60)  # fmt: skip

    (tmp_path / ".gitignore").write_text("build/\n")
    (tmp_path / "kept.png").write_text("committed")
    (tmp_path / "edited.py").write_text("committed")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "start")
    (tmp_path / "edited.py").write_text("edited before the run")

    def run(during: str) -> subprocess.CompletedProcess[str]:
        body = f"{defined}tracked_before=$(tracked)\n{during}\ntracked_unchanged"
        return subprocess.run(["bash", "-c", body], cwd=tmp_path, capture_output=True, text=True, timeout=60)

    quiet = run("mkdir -p build && echo x > build/shot.png && echo y > untracked.ipynb")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    changed = run("echo retaken > kept.png")
    assert changed.returncode == 1 and " M kept.png" in changed.stdout, changed.stdout + changed.stderr
    again = run("echo edited again > edited.py")  # already edited before: changed again by the run
    assert again.returncode == 1 and " M edited.py" in again.stdout
